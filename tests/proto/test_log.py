"""proto.log: golden bytes, strict decoding with named fields, the chain, and random round trips."""

import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.proto.errors import EncodeError, RecordError
from boxmaker.proto.log import (
    GENESIS_PREV,
    RECORD_TYPES,
    Assistant,
    CacheLoss,
    LogLine,
    LogRecord,
    SessionStart,
    Usage,
    User,
    chain,
    decode_line,
    encode_line,
    next_prev,
    verify_log,
)
from boxmaker.proto.tool import ToolCall
from tests.support.log_strategies import hexes, records, uints

from .log_cases import GOLDEN_DIR, LINES, PREV_ABC, SESSION, SESSION_FILE, T

# --- golden bytes --------------------------------------------------------------------------------


def golden(name: str) -> bytes:
    return (GOLDEN_DIR / f"{name}.jsonl").read_bytes()


def test_every_record_type_has_a_golden_line() -> None:
    assert {type(rec).TAG for _, _, rec in LINES.values()} == set(RECORD_TYPES)
    assert {p.name for p in GOLDEN_DIR.glob("*.jsonl")} == {f"{n}.jsonl" for n in LINES} | {
        SESSION_FILE
    }


@pytest.mark.parametrize("name", list(LINES))
def test_encode_gives_the_golden_bytes(name: str) -> None:
    seq, prev, record = LINES[name]
    assert encode_line(record, seq, prev) == golden(name)


@pytest.mark.parametrize("name", list(LINES))
def test_golden_lines_decode_to_their_records(name: str) -> None:
    assert decode_line(golden(name)) == LogLine(*LINES[name])
    line = decode_line(golden(name))
    assert encode_line(line.record, line.seq, line.prev) == golden(name)


def test_golden_key_order_is_type_seq_prev_then_the_brief_order() -> None:
    obj = orjson.loads(golden("tool_result"))
    assert list(obj) == [
        "type", "seq", "prev", "time", "call", "tool_call_id", "content", "class", "untrusted",
        "truncated",
    ]  # fmt: skip
    assert list(orjson.loads(golden("session_start"))) == [
        "type", "seq", "prev", "time", "session", "epoch", "slot", "baseline",
    ]  # fmt: skip


def test_escapes_are_json_escapes_and_unicode_is_raw_utf8() -> None:
    esc = golden("user_escapes")
    assert esc.count(b"\n") == 1
    assert b'line one\\nline \\"two\\"\\r\\n\\ttab, back\\\\slash, NUL\\u0000' in esc
    uni = golden("user_unicode")
    assert "日本語 😀".replace(" ", ", emoji ").encode() in uni
    assert "\u2028".encode() in uni  # raw, like every other non-ASCII character


def test_the_whole_log_fixture_verifies_and_decodes_to_the_session() -> None:
    data = (GOLDEN_DIR / SESSION_FILE).read_bytes()
    log = verify_log(data)
    assert list(log.records) == SESSION
    assert log.next_seq == len(SESSION)
    # The chain re-derived here with hashlib directly, not through proto.
    lines = data.splitlines(keepends=True)
    assert log.next_prev == hashlib.sha256(lines[-1]).hexdigest()
    assert [orjson.loads(x)["prev"] for x in lines] == [GENESIS_PREV] + [
        hashlib.sha256(x).hexdigest() for x in lines[:-1]
    ]


def make(cls: Any, *args: Any) -> Any:
    """Builds a value with wrong field types on purpose, past the type checker."""
    return cls(*args)


# --- strict decoding -----------------------------------------------------------------------------

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

# (line, words the RecordError message must contain)
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


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_lines_raise_record_error_naming_what_was_wrong(case: str) -> None:
    line, words = BAD_LINES[case]
    with pytest.raises(RecordError) as info:
        decode_line(line)
    assert words in str(info.value)


def test_null_is_allowed_where_the_field_is_optional() -> None:
    entry = decode_line(golden("assistant_nulls"))
    assert entry.record == Assistant(T, None, None, ())


@pytest.mark.parametrize(
    ("record", "seq", "prev", "words"),
    [
        (User(T, "x"), True, GENESIS_PREV, "seq: expected int, got bool"),
        (User(T, "x"), -1, GENESIS_PREV, "seq: expected integer from 0"),
        (User(T, "x"), 0, "0" * 63, "prev: expected 64 lowercase hex digits"),
        (User("yesterday", "x"), 0, GENESIS_PREV, "user.time: expected an RFC 3339 UTC time"),
        (User(T, "a\udc80b"), 0, GENESIS_PREV, "user.content: lone surrogate at index 1"),
        (
            make(Usage, T, 1, 2, 3, 4, 1),
            0,
            GENESIS_PREV,
            "usage.thinking_capped: expected bool, got int",
        ),
        (CacheLoss(T, 2**63, 0), 0, GENESIS_PREV, "cache_loss.expected: expected integer from 0"),
        (
            make(Assistant, T, None, None, [ToolCall("a", "b", "")]),
            0,
            GENESIS_PREV,
            "assistant.tool_calls: expected tuple, got list",
        ),
        (
            make(Assistant, T, None, None, ("x",)),
            0,
            GENESIS_PREV,
            "assistant.tool_calls[0]: expected ToolCall, got str",
        ),
        (
            SessionStart(T, "a/b", 0, 0, PREV_ABC),
            0,
            GENESIS_PREV,
            "session_start.session: expected a session id",
        ),
        (
            make(ToolCall, "a", "b", "c"),
            0,
            GENESIS_PREV,
            "record: expected a LogRecord, got ToolCall",
        ),
    ],
)
def test_encode_refuses_records_that_would_not_read_back(
    record: LogRecord, seq: int, prev: str, words: str
) -> None:
    with pytest.raises(EncodeError) as info:
        encode_line(record, seq, prev)
    assert words in str(info.value)


# --- the chain -----------------------------------------------------------------------------------

SESSION_DATA = (GOLDEN_DIR / SESSION_FILE).read_bytes()
SESSION_LINES = SESSION_DATA.splitlines(keepends=True)


def test_chain_walks_the_fixture_and_ends_at_the_next_prev() -> None:
    prev = GENESIS_PREV
    for line in SESSION_LINES:
        prev = chain(prev, line)
    assert prev == verify_log(SESSION_DATA).next_prev == next_prev(SESSION_LINES[-1])


def test_chain_refuses_a_line_that_links_elsewhere() -> None:
    with pytest.raises(RecordError, match=f"prev: the line links to {GENESIS_PREV}, expected"):
        chain(PREV_ABC, SESSION_LINES[0])


def test_an_empty_log_is_empty() -> None:
    log = verify_log(b"")
    assert (log.lines, log.next_seq, log.next_prev) == ((), 0, GENESIS_PREV)


def edited(i: int, old: bytes, new: bytes) -> bytes:
    lines = list(SESSION_LINES)
    assert old in lines[i]
    lines[i] = lines[i].replace(old, new)
    return b"".join(lines)


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


@pytest.mark.parametrize("case", list(BROKEN_LOGS))
def test_verify_log_names_the_first_bad_line(case: str) -> None:
    data, words = BROKEN_LOGS[case]
    with pytest.raises(RecordError) as info:
        verify_log(data)
    assert words in str(info.value)


def test_edited_then_rehashed_line_still_breaks_the_next_link() -> None:
    # Rewriting line 2 and fixing nothing else: line 3's prev no longer hashes line 2.
    data = edited(1, b"What time", b"What tune")
    with pytest.raises(RecordError, match=r"line 3: prev is .*expected the hash of line 2"):
        verify_log(data)


def test_a_log_cut_at_a_line_boundary_verifies_the_chain_proves_no_tail() -> None:
    # The documented limit: completeness needs a count from elsewhere.
    log = verify_log(b"".join(SESSION_LINES[:5]))
    assert log.next_seq == 5


# --- random round trips --------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(records, uints, hexes)
def test_random_records_round_trip(record: LogRecord, seq: int, prev: str) -> None:
    line = encode_line(record, seq, prev)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_line(line) == LogLine(seq, prev, record)


@settings(max_examples=400, deadline=None)
@given(records, st.data())
def test_mutated_lines_decode_canonically_or_raise_record_error(
    record: LogRecord, data: st.DataObject
) -> None:
    line = bytearray(encode_line(record, 3, PREV_ABC))
    at = data.draw(st.integers(0, len(line) - 1), label="at")
    how = data.draw(st.sampled_from(["flip", "delete", "insert"]), label="how")
    byte = data.draw(st.integers(0, 255), label="byte")
    if how == "flip":
        line[at] ^= byte or 1
    elif how == "delete":
        del line[at]
    else:
        line.insert(at, byte)
    try:
        entry = decode_line(bytes(line))
    except RecordError:
        return  # any other exception fails the test
    assert encode_line(entry.record, entry.seq, entry.prev) == bytes(line)


def test_a_later_epoch_chains_from_the_epoch_end_line() -> None:
    from boxmaker.proto.log_fast import verify_records

    link = "ab" * 32
    start = SessionStart("2026-12-01T00:00:00.000Z", "s1", 1, 0, "cd" * 32)
    line = encode_line(start, 0, link)
    assert verify_log(line, link).records == (start,)
    assert verify_records(line, link) == ([start], next_prev(line))
    for check in (verify_log, verify_records):
        with pytest.raises(RecordError, match=r"line 1: prev is abab.*expected 64 zeros"):
            check(line)
        with pytest.raises(RecordError, match=r"expected (ab){32} \(the previous epoch_end\)"):
            check(encode_line(start, 0, GENESIS_PREV), link)


def test_a_user_record_with_a_client_ref_round_trips_and_one_without_keeps_its_bytes() -> None:
    """M4 section 6: client_ref is optional; left out, the line is what it was before M4."""
    from boxmaker.proto import User, encode_line, verify_log
    from boxmaker.proto.log_fast import verify_records

    t = "2026-12-02T08:00:00.000Z"
    plain = encode_line(User(t, "hi"), 0, GENESIS_PREV)
    assert plain == (
        b'{"type":"user","seq":0,"prev":"'
        + GENESIS_PREV.encode()
        + b'","time":"'
        + t.encode()
        + b'","content":"hi"}\n'
    )
    with_ref = encode_line(User(t, "hi", "mm:abc"), 0, GENESIS_PREV)
    assert with_ref == plain[:-2] + b',"client_ref":"mm:abc"}\n'
    for line, record in ((plain, User(t, "hi")), (with_ref, User(t, "hi", "mm:abc"))):
        assert verify_log(line).records == (record,)
        assert verify_records(line)[0] == [record]
    for bad in (b'"client_ref":"a b"', b'"client_ref":""', b'"client_ref":null'):
        line = plain[:-2] + b"," + bad + b"}\n"
        with pytest.raises(RecordError, match="client_ref"):
            verify_log(line)
        with pytest.raises(RecordError, match="client_ref"):
            verify_records(line)
