"""The session log: LogRecord variants, their one-line JSON form, and the prev chain.

A log is a file of lines, one record per line, each line one JSON object ending in b"\\n", written
by orjson with the keys in a fixed order:

    {"type":"user","seq":3,"prev":"<64 hex>","time":"2026-11-30T03:48:37.123Z","content":"hi"}

- `type` is the record's tag (the snake_case name of the variant);
- `seq` is the record's index in the log, from 0;
- `prev` is the hex SHA-256 of the previous line's bytes, newline included; the first line's
  `prev` is GENESIS_PREV, 64 zeros;
- then the record's own fields, in the order the M2b brief lists them (the dataclass field order).

Decoding is strict and canonical: a line must be exactly the bytes `encode_line` would write for
what it decodes to, so one record has one spelling and the chain hashes are stable. Every failure
raises RecordError naming the field and the expected type.

The chain proves order and integrity of the lines present, not completeness: a log cut after a
whole line still verifies. The session store's rules (a torn last line is refused, nothing is
repaired) cover the rest.
"""

from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import orjson

from ._codec import (
    BOOL,
    CLIENT_REF_OR_ABSENT,
    HEX64,
    OPT_STR,
    SESSION_ID,
    STR,
    TIME,
    UINT,
    JsonObj,
    enum_codec,
    from_obj,
    json_type,
    keys,
    load_json_object,
    optional_keys,
    quote,
    to_obj,
    tuple_of,
    wire,
)
from .chain import walk_chain
from .errors import BodyError, EncodeError, RecordError
from .hash import sha256_hex
from .tool import ResultClass, ToolCall

GENESIS_PREV = "0" * 64


@dataclass(frozen=True, slots=True)
class SessionStart:
    """Written once, at session start. `baseline` is the hex SHA-256 of the baseline file."""

    TAG: ClassVar[str] = "session_start"
    time: str = field(metadata=wire(TIME))
    session: str = field(metadata=wire(SESSION_ID))
    epoch: int = field(metadata=wire(UINT))
    slot: int = field(metadata=wire(UINT))
    baseline: str = field(metadata=wire(HEX64))


@dataclass(frozen=True, slots=True)
class User:
    """A user message, written before the request that carries it is sent. `client_ref`
    (optional, M4 section 6): the turn frame's, so a repeated delivery is answered from the log;
    left out when None, so a record without one is byte for byte what it was before."""

    TAG: ClassVar[str] = "user"
    time: str = field(metadata=wire(TIME))
    content: str = field(metadata=wire(STR))
    client_ref: str | None = field(default=None, metadata=wire(CLIENT_REF_OR_ABSENT))


@dataclass(frozen=True, slots=True)
class Assistant:
    """A final completion: the three fields exactly as the server returned them."""

    TAG: ClassVar[str] = "assistant"
    time: str = field(metadata=wire(TIME))
    content: str | None = field(metadata=wire(OPT_STR))
    reasoning_content: str | None = field(metadata=wire(OPT_STR))
    tool_calls: tuple[ToolCall, ...] = field(metadata=wire(tuple_of(ToolCall)))


@dataclass(frozen=True, slots=True)
class Usage:
    """Written right after each Assistant: the completion's timings and thinking accounting."""

    TAG: ClassVar[str] = "usage"
    time: str = field(metadata=wire(TIME))
    cache_n: int = field(metadata=wire(UINT))
    prompt_n: int = field(metadata=wire(UINT))
    predicted_n: int = field(metadata=wire(UINT))
    reasoning_tokens: int = field(metadata=wire(UINT))
    thinking_capped: bool = field(metadata=wire(BOOL))


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The (capped) result of one tool call. The JSON key of `class_` is `class`."""

    TAG: ClassVar[str] = "tool_result"
    time: str = field(metadata=wire(TIME))
    call: int = field(metadata=wire(UINT))
    tool_call_id: str = field(metadata=wire(STR))
    content: str = field(metadata=wire(STR))
    class_: ResultClass = field(metadata=wire(enum_codec(ResultClass), key="class"))
    untrusted: bool = field(metadata=wire(BOOL))
    truncated: bool = field(metadata=wire(BOOL))


@dataclass(frozen=True, slots=True)
class CacheLoss:
    """Two consecutive completions where the cache fell short: `expected` tokens, `got` reused."""

    TAG: ClassVar[str] = "cache_loss"
    time: str = field(metadata=wire(TIME))
    expected: int = field(metadata=wire(UINT))
    got: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class CacheSaved:
    """The session's prompt cache in `slot` was saved to a file (issue 14): `tokens` of it,
    `written` bytes, in `elapsed_us` as the server timed it. Written by the session's worker,
    at the session's next request after loopd's main process saved it."""

    TAG: ClassVar[str] = "cache_saved"
    time: str = field(metadata=wire(TIME))
    slot: int = field(metadata=wire(UINT))
    tokens: int = field(metadata=wire(UINT))
    written: int = field(metadata=wire(UINT))
    elapsed_us: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class CacheRestored:
    """The session's saved prompt cache (`tokens`, `read` bytes of the file) was loaded into `slot`
    before its request, in `elapsed_us` as the server timed it (issue 14)."""

    TAG: ClassVar[str] = "cache_restored"
    time: str = field(metadata=wire(TIME))
    slot: int = field(metadata=wire(UINT))
    tokens: int = field(metadata=wire(UINT))
    read: int = field(metadata=wire(UINT))
    elapsed_us: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """Closes epoch `epoch`'s log (compaction, issue 21): the last line of `<epoch>.jsonl`, and
    the commit point of the switch. `summary` is the model's summary of the folded turns;
    `keep_from` the seq of the first record of this log copied into the next epoch (the folded
    records are those before it); `baseline` the hex SHA-256 of `<epoch + 1>.baseline.json`,
    written before this line; the three counts are the summary completion's."""

    TAG: ClassVar[str] = "epoch_end"
    time: str = field(metadata=wire(TIME))
    epoch: int = field(metadata=wire(UINT))
    summary: str = field(metadata=wire(STR))
    keep_from: int = field(metadata=wire(UINT))
    baseline: str = field(metadata=wire(HEX64))
    cache_n: int = field(metadata=wire(UINT))
    prompt_n: int = field(metadata=wire(UINT))
    predicted_n: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class Stopped:
    """The owner stopped the turn (Ctrl-C in `bxctl chat`, a `cancel` frame on loop.sock): the
    generation was cancelled at the server (its connection closed) and nothing of the unfinished
    completion was recorded but this. `shown` is the answer's text streamed to the owner before
    the stop ("" when none was). Replay gives it no message: the next request still extends the
    last one byte for byte, and the model sees the owner's next message after the stopped one."""

    TAG: ClassVar[str] = "stopped"
    time: str = field(metadata=wire(TIME))
    shown: str = field(metadata=wire(STR))


LogRecord = (
    SessionStart
    | User
    | Assistant
    | Usage
    | ToolResult
    | CacheLoss
    | CacheSaved
    | CacheRestored
    | EpochEnd
    | Stopped
)

RECORD_TYPES: dict[str, type[LogRecord]] = {
    c.TAG: c
    for c in (
        SessionStart,
        User,
        Assistant,
        Usage,
        ToolResult,
        CacheLoss,
        CacheSaved,
        CacheRestored,
        EpochEnd,
        Stopped,
    )
}
_TYPES = frozenset(RECORD_TYPES.values())
_HEAD = ("type", "seq", "prev")


class LogLine(NamedTuple):
    """One decoded line: its place in the chain and its record."""

    seq: int
    prev: str
    record: LogRecord


def encode_line(record: LogRecord, seq: int, prev: str) -> bytes:
    """The bytes of one log line, newline included.

    Raises:
        EncodeError: `record` is not a LogRecord or a field breaks its type (a bool where an int
            goes, a bad time, a lone surrogate), so the line would not read back.
    """
    if type(record) not in _TYPES:
        raise EncodeError(f"record: expected a LogRecord, got {type(record).__name__}")
    head: JsonObj = {
        "type": record.TAG,
        "seq": UINT.encode(seq, "seq"),
        "prev": HEX64.encode(prev, "prev"),
    }
    obj = to_obj(record, record.TAG, into=head)
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def decode_line(line: bytes) -> LogLine:
    """Decodes one log line, newline included, strictly.

    Raises:
        RecordError: the line is torn, not UTF-8, not JSON, not an object, of an unknown type,
            lacks or adds a key, has a value of the wrong type or shape, or is not spelt the way
            encode_line spells it. The message names the field.
    """
    line = bytes(line)
    if not line.endswith(b"\n"):
        raise RecordError("line: no newline at the end; an incomplete line (a torn write?)")
    at = line.find(b"\n")
    if at != len(line) - 1:
        raise RecordError(f"line: newline inside the line at byte {at}; a line holds one record")
    obj = load_json_object(line[:-1], "the record", _line_error)
    try:
        entry = _decode_obj(obj)
    except BodyError as e:
        raise RecordError(str(e)) from None
    if encode_line(entry.record, entry.seq, entry.prev) != line:
        raise RecordError(_why_not_canonical(obj, type(entry.record)))
    return entry


def _line_error(message: str) -> RecordError:
    return RecordError(f"line: {message}")


def _decode_obj(obj: JsonObj) -> LogLine:
    if "type" not in obj:
        raise BodyError('line: missing key "type"')
    tag = obj["type"]
    cls = RECORD_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        known = ", ".join(RECORD_TYPES)
        shown = quote(tag) if isinstance(tag, str) else json_type(tag)
        raise BodyError(f"type: expected a record type ({known}), got {shown}")
    record = from_obj(cls, obj, cls.TAG, extra_keys=_HEAD)
    return LogLine(UINT.decode(obj["seq"], "seq"), HEX64.decode(obj["prev"], "prev"), record)


def _why_not_canonical(obj: JsonObj, cls: type[LogRecord]) -> str:
    optional = optional_keys(cls)  # an optional key left out is not out of order
    expected = [*_HEAD, *(k for k in keys(cls) if k in obj or k not in optional)]
    if list(obj) != expected:
        return f"line: keys out of order: expected {', '.join(expected)}; got {', '.join(obj)}"
    return (
        "line: not in the canonical form encode_line writes "
        "(whitespace, string escapes or a duplicate key differ)"
    )


# --- the chain -----------------------------------------------------------------------------------


def next_prev(line: bytes) -> str:
    """The `prev` of the line after `line`: the hex SHA-256 of `line`'s bytes, newline included."""
    return sha256_hex(line)


def chain(prev: str, line: bytes) -> str:
    """Checks that `line` links to `prev` and returns the `prev` of the line after it.

    Raises:
        RecordError: `line` does not decode, or carries another `prev`.
    """
    got = decode_line(line).prev
    if got != prev:
        raise RecordError(f"prev: the line links to {got}, expected {prev}")
    return next_prev(line)


@dataclass(frozen=True, slots=True)
class VerifiedLog:
    """A whole log that decoded and chained, and where the next line continues it."""

    lines: tuple[LogLine, ...]
    next_seq: int
    next_prev: str

    @property
    def records(self) -> tuple[LogRecord, ...]:
        return tuple(entry.record for entry in self.lines)


def verify_log(data: bytes, first_prev: str = GENESIS_PREV) -> VerifiedLog:
    """Decodes a whole log and checks its chain: seq counts from 0, each prev hashes the line
    before, the first prev is `first_prev` (GENESIS_PREV for epoch 0; for a later epoch the hash
    of the `epoch_end` line that closed the one before), and the last line is complete. Empty
    data is an empty log.

    Raises:
        RecordError: "line N: ..." with N counted from 1, naming the first line that fails.
    """
    what = None if first_prev == GENESIS_PREV else f"{first_prev} (the previous epoch_end)"
    lines, prev = walk_chain(data, _entry, 0, first_prev, what)
    return VerifiedLog(tuple(lines), len(lines), prev)


def _entry(line: bytes) -> tuple[int, str, LogLine]:
    entry = decode_line(line)
    return entry.seq, entry.prev, entry
