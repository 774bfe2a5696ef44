"""The records pinned by tests/golden/log/: one line of every kind, and one small whole log.

scripts/regen_golden_log.py writes the fixtures from these; tests/proto/test_log.py checks that
encoding them still gives the fixtures' bytes. A change here or in the encoder shows up as a diff
of the fixtures, to be reviewed by eye.
"""

from pathlib import Path

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

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden" / "log"

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
