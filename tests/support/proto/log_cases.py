"""The records pinned by tests/golden/log/: one line of every kind, and one small whole log.

scripts/regen_golden_log.py writes the fixtures from these; tests/proto/test_log.py checks that
encoding them still gives the fixtures' bytes. A change here or in the encoder shows up as a diff
of the fixtures, to be reviewed by eye.
"""

from pathlib import Path
from typing import Any

import orjson

from boxmaker.proto.log import (
    GENESIS_PREV,
    Assistant,
    CacheLoss,
    CacheRestored,
    CacheSaved,
    EpochEnd,
    LogRecord,
    SessionStart,
    Stopped,
    ToolResult,
    Usage,
    User,
)
from boxmaker.proto.tool import ResultClass, ToolCall

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "golden" / "log"

T = "2026-11-30T03:48:37.123Z"
# sha256(b"abc") and sha256(b""): any valid 64-hex value serves as a prev of a lone line.
PREV_ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
BASELINE = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

CLOCK = ToolCall("call_0", "clock", "{}")
ECHO = ToolCall(
    "call_1", "call_tool", '{"name": "echo", "arguments": {"text": "a \\"quoted\\" word"}}'
)

# name -> (seq, prev, record); one golden file `<name>.jsonl` each.
LINES: dict[str, tuple[int, str, LogRecord]] = {
    "session_start": (0, GENESIS_PREV, SessionStart(T, "20261130-034837-k3f9", 0, 0, BASELINE)),
    "user": (1, PREV_ABC, User(T, "What time is it?")),
    "user_unicode": (
        2,
        PREV_ABC,
        User(
            T, "héllo, 日本語, emoji 😀, RTL \u05e9\u05dc\u05d5\u05dd, NBSP\u00a0, LS\u2028PS\u2029"
        ),
    ),
    "user_escapes": (
        3,
        PREV_ABC,
        User(
            "2026-11-30T03:48:37Z",
            'line one\nline "two"\r\n\ttab, back\\slash, NUL\x00, US\x1f, DEL\x7f, </script>',
        ),
    ),
    "assistant_tool_calls": (
        4,
        PREV_ABC,
        Assistant(T, "Let me check.", "The user wants the time.\nUse the clock.", (CLOCK, ECHO)),
    ),
    "assistant_nulls": (5, PREV_ABC, Assistant(T, None, None, ())),
    "assistant_text": (6, PREV_ABC, Assistant(T, "It is 03:48 UTC.", None, ())),
    "usage": (7, PREV_ABC, Usage(T, 512, 37, 12, 0, False)),
    "usage_capped": (8, PREV_ABC, Usage(T, 0, 9_000_000_000, 4_352, 4_352, True)),
    "tool_result": (
        9,
        PREV_ABC,
        ToolResult(T, 0, "call_0", "2026-11-30T03:48:37Z", ResultClass.PUBLIC, False, False),
    ),
    "tool_result_truncated": (
        10,
        PREV_ABC,
        ToolResult(T, 41, "call_1", "x" * 40 + "[truncated]", ResultClass.PUBLIC, True, True),
    ),
    "cache_loss": (11, PREV_ABC, CacheLoss(T, 1_024, 37)),
    "cache_saved": (13, PREV_ABC, CacheSaved(T, 0, 1_745, 14_309_796, 49_865)),
    "cache_restored": (14, PREV_ABC, CacheRestored(T, 1, 1_745, 14_309_796, 42_937)),
    "stopped": (15, PREV_ABC, Stopped(T, "The capital of Fr")),
    "epoch_end": (
        12,
        PREV_ABC,
        EpochEnd(
            "2026-12-01T00:00:00.000Z",
            0,
            "## Goal\nfix the clock\n## Done\nasked for the time",
            9,
            BASELINE,
            1_530,
            41,
            96,
        ),
    ),
}

# A short session: start, a tool turn, a cache loss, the answer. Chained from GENESIS_PREV.
SESSION_FILE = "session.jsonl"
SESSION: list[LogRecord] = [
    SessionStart(T, "s1", 0, 1, BASELINE),
    User("2026-11-30T03:48:38.000Z", "What time is it?"),
    Assistant("2026-11-30T03:48:39.500Z", None, "Call the clock.", (CLOCK,)),
    Usage("2026-11-30T03:48:39.501Z", 0, 812, 20, 5, False),
    ToolResult(
        "2026-11-30T03:48:39.502Z",
        0,
        "call_0",
        "2026-11-30T03:48:39Z",
        ResultClass.PUBLIC,
        False,
        False,
    ),
    CacheLoss("2026-11-30T03:48:40.000Z", 832, 512),
    Assistant("2026-11-30T03:48:40.900Z", "It is 03:48 UTC.", None, ()),
    Usage("2026-11-30T03:48:40.901Z", 512, 345, 9, 0, False),
]


# (line, words the RecordError message must contain)
def golden(name: str) -> bytes:
    return (GOLDEN_DIR / f"{name}.jsonl").read_bytes()


def make(cls: Any, *args: Any) -> Any:
    """Builds a value with wrong field types on purpose, past the type checker."""
    return cls(*args)


BASE = {"type": "user", "seq": 1, "prev": PREV_ABC, "time": T, "content": "hi"}


def raw(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = dict(base)
    for k, v in changes.items():
        if v is DROP:
            del out[k]
        else:
            out[k] = v
    return out


DROP = object()


ASSISTANT = orjson.loads(golden("assistant_tool_calls"))


USAGE = orjson.loads(golden("usage"))


START = orjson.loads(golden("session_start"))


RESULT = orjson.loads(golden("tool_result"))


SESSION_DATA = (GOLDEN_DIR / SESSION_FILE).read_bytes()
SESSION_LINES = SESSION_DATA.splitlines(keepends=True)


def edited(i: int, old: bytes, new: bytes) -> bytes:
    lines = list(SESSION_LINES)
    assert old in lines[i]
    lines[i] = lines[i].replace(old, new)
    return b"".join(lines)


BAD_LINES: dict[str, tuple[bytes, str]] = {
    "unknown type": (raw(with_(BASE, type="note")), "type: expected a record type (session_start"),
    "type not a string": (raw(with_(BASE, type=1)), "type: expected a record type"),
    "no type": (raw(with_(BASE, type=DROP)), 'line: missing key "type"'),
    "missing field": (raw(with_(BASE, content=DROP)), 'user: missing key "content"'),
    "missing seq": (raw(with_(BASE, seq=DROP)), 'user: missing key "seq"'),
    "extra field": (raw({**BASE, "mood": "ok"}), 'user: unexpected key "mood"'),
    "bool for int": (
        raw(with_(USAGE, cache_n=True)),
        "usage.cache_n: expected integer, got boolean",
    ),
    "float for int": (
        raw(with_(USAGE, prompt_n=1.5)),
        "usage.prompt_n: expected integer, got number",
    ),
    "string for int": (
        raw(with_(USAGE, predicted_n="3")),
        "usage.predicted_n: expected integer, got string",
    ),
    "negative int": (
        raw(with_(USAGE, reasoning_tokens=-1)),
        "usage.reasoning_tokens: expected integer from 0",
    ),
    "int for bool": (
        raw(with_(USAGE, thinking_capped=0)),
        "usage.thinking_capped: expected boolean, got integer",
    ),
    "null for string": (raw(with_(BASE, content=None)), "user.content: expected string, got null"),
    "int for optional string": (
        raw(with_(ASSISTANT, content=1)),
        "assistant.content: expected string or null, got integer",
    ),
    "object for optional string": (
        raw(with_(ASSISTANT, reasoning_content={})),
        "assistant.reasoning_content: expected string or null, got object",
    ),
    "null tool_calls": (
        raw(with_(ASSISTANT, tool_calls=None)),
        "assistant.tool_calls: expected array, got null",
    ),
    "bad tool call": (
        raw(with_(ASSISTANT, tool_calls=[{"id": "a", "name": None, "arguments": ""}])),
        "assistant.tool_calls[0].name: expected string, got null",
    ),
    "tool call extra key": (
        raw(
            with_(
                ASSISTANT,
                tool_calls=[{"id": "a", "name": "b", "arguments": "", "type": "function"}],
            )
        ),
        'assistant.tool_calls[0]: unexpected key "type"',
    ),
    "unknown class": (
        raw(with_(RESULT, **{"class": "secret"})),
        'tool_result.class: expected one of "public", got "secret"',
    ),
    "bool as string": (
        raw(with_(RESULT, untrusted="false")),
        "tool_result.untrusted: expected boolean, got string",
    ),
    "bad session id": (
        raw(with_(START, session="../x")),
        "session_start.session: expected a session id",
    ),
    "bad baseline": (
        raw(with_(START, baseline="ABC")),
        'session_start.baseline: expected 64 lowercase hex digits, got "ABC"',
    ),
    "seq bool": (raw(with_(BASE, seq=False)), "seq: expected integer, got boolean"),
    "seq negative": (raw(with_(BASE, seq=-1)), "seq: expected integer from 0 to 2^63-1, got -1"),
    "seq string": (raw(with_(BASE, seq="1")), "seq: expected integer, got string"),
    "prev upper case": (
        raw(with_(BASE, prev=PREV_ABC.upper())),
        "prev: expected 64 lowercase hex digits",
    ),
    "prev short": (raw(with_(BASE, prev=PREV_ABC[:63])), "prev: expected 64 lowercase hex digits"),
    "prev null": (raw(with_(BASE, prev=None)), "prev: expected string, got null"),
    "time without zone": (
        raw(with_(BASE, time="2026-11-30T03:48:37.123")),
        "user.time: expected an RFC 3339 UTC time like 2026-11-30T03:48:37.123Z",
    ),
    "time not a date": (
        raw(with_(BASE, time="2026-02-30T03:48:37Z")),
        "user.time: expected an RFC 3339 UTC time",
    ),
    "time number": (raw(with_(BASE, time=1764474517)), "user.time: expected string, got integer"),
    "not UTF-8": (
        raw(BASE).replace(b'"hi"', b'"h\xffi"'),
        "line: the record is not UTF-8 (invalid start byte at byte",
    ),
    "not JSON": (b'{"type":"user",\n', "line: the record is not JSON"),
    "empty line": (b"\n", "line: the record is not JSON"),
    "array": (b"[1]\n", "line: the record is not a JSON object (got array)"),
    "string": (b'"user"\n', "line: the record is not a JSON object (got string)"),
    "no newline": (raw(BASE)[:-1], "line: no newline at the end"),
    "CR before newline": (raw(BASE)[:-1] + b"\r\n", "line: not in the canonical form"),
    "embedded newline": (raw(BASE) + raw(BASE), "line: newline inside the line at byte"),
    "leading space": (b" " + raw(BASE), "line: not in the canonical form"),
    "escaped non-ASCII": (
        raw(with_(BASE, content="é")).replace("é".encode(), b"\\u00e9"),
        "line: not in the canonical form",
    ),
    "duplicate key": (
        raw(BASE).replace(b'"content":"hi"', b'"content":"x","content":"hi"'),
        "line: not in the canonical form",
    ),
    "minus zero": (
        raw(with_(BASE, seq=0)).replace(b'"seq":0', b'"seq":-0'),
        "line: not in the canonical form",
    ),
    "keys out of order": (
        raw({"seq": 1, **with_(BASE, seq=DROP)}),
        "line: keys out of order: expected type, seq, prev, time, content; got seq, type",
    ),
    "lone surrogate escape": (
        raw(BASE).replace(b'"hi"', b'"\\ud800"'),
        "line: the record is not JSON",
    ),
}


BROKEN_LOGS: dict[str, tuple[bytes, str]] = {
    "edited content": (edited(1, b"What time", b"What tune"), "line 3: prev is "),
    "deleted line": (
        b"".join(SESSION_LINES[:2] + SESSION_LINES[3:]),
        "line 3: seq is 3, expected 2",
    ),
    "swapped lines": (
        b"".join([SESSION_LINES[0], SESSION_LINES[2], SESSION_LINES[1], *SESSION_LINES[3:]]),
        "line 2: seq is 2, expected 1",
    ),
    "first prev not zeros": (edited(0, b"0" * 64, b"1" * 64), "line 1: prev is 1111"),
    "torn last line": (
        SESSION_DATA[:-10],
        "line 8: no newline at the end; the last line is incomplete",
    ),
    "bad line inside": (
        edited(3, b'"cache_n":0', b'"cache_n":null'),
        "line 4: usage.cache_n: expected integer, got null",
    ),
    "whole-line error": (
        SESSION_DATA + b"[]\n",
        "line 9: the record is not a JSON object (got array)",
    ),
}
