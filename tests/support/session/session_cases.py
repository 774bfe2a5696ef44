"""Shared bits for the session tests: a baseline, a small conversation, a session on disk."""

from pathlib import Path

from boxmaker.proto import (
    Assistant,
    CacheLoss,
    ResultClass,
    ToolCall,
    ToolResult,
    ToolSchema,
    Usage,
    User,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session.baseline import Baseline
from boxmaker.session.store import SessionStore

T0 = "2026-11-30T03:48:37.123Z"

CLOCK = ToolSchema(
    "clock",
    "Returns the current time as RFC 3339.",
    {"type": "object", "properties": {}, "required": []},
)
FIND = ToolSchema(
    "find_tool",
    "Finds a tool by name or description.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
BASELINE = Baseline("You are a test agent. Be brief.", (CLOCK, FIND))


def t(i: int) -> str:
    """A distinct, valid time for record i."""
    return f"2026-11-30T03:{48 + i // 60 % 10:02d}:{i % 60:02d}.{i % 1000:03d}Z"


# Lines 2.. of a session (line 1 is session_start): two turns, the first with a tool call.
CONVERSATION: tuple[LogRecord, ...] = (
    User(t(1), "What time is it?"),
    Assistant(t(2), None, "Call the clock.", (ToolCall("call_0", "clock", "{}"),)),
    Usage(t(3), 0, 812, 20, 5, False),
    ToolResult(t(4), 0, "call_0", "2026-11-30T03:48:39Z", ResultClass.PUBLIC, False, False),
    Assistant(t(5), "It is 03:48 UTC.", None, ()),
    Usage(t(6), 830, 12, 9, 0, False),
    User(t(7), "Thanks! And in Paris? Ünïcödé ✓"),
    Assistant(t(8), "04:48 in Paris.", "Paris is UTC+1 in winter.", ()),
    Usage(t(9), 840, 20, 8, 6, False),
    CacheLoss(t(10), 860, 0),
)


def make_session(
    home: Path, session_id: str = "s1", records: tuple[LogRecord, ...] = CONVERSATION
) -> Path:
    """Creates a session with `records` after its session_start; returns its log's path."""
    with SessionStore(home).create(session_id, BASELINE, slot=0, time=T0) as log:
        for record in records:
            log.append(record)
        return log.log_path


REPO = Path(__file__).resolve().parents[3]
SYSTEM_MD = REPO / "conf" / "system.md"
CALL_TOOL = ToolSchema(
    "call_tool",
    "Calls a tool that find_tool found, by name, with its arguments.",
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    },
)
