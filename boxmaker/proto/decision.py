"""brokerd's decision log: its record variants and their one-line JSON form (like `log`'s for
the session log). No I/O.

A line is `{"type": <tag>, "seq": n, "prev": <hex SHA-256 of the line before>, ...fields}`, the
fields in the dataclass's order, written by orjson; decoding is strict and canonical: a line
must be exactly the bytes `encode_line` writes for what it decodes to. The chain itself is
checked by `chain.walk_chain`, the same walk the session log's `verify_log` uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from ._codec import (
    BOOL,
    BOOL_OR_ABSENT,
    HEX64,
    OBJECT,
    OPT_STR,
    STR,
    STR_OR_ABSENT,
    TIME,
    UINT,
    Codec,
    JsonObj,
    from_obj,
    load_json_object,
    quote,
    to_obj,
    wire,
)
from .errors import BodyError, EncodeError, RecordError

# A JSON object that may be left out: None in Python, no key in JSON (an old line reads the same).
OBJECT_OR_ABSENT = Codec("object", OBJECT.decode, OBJECT.encode, absent_is_none=True)
UINT_OR_ABSENT = Codec("integer", UINT.decode, UINT.encode, absent_is_none=True)


@dataclass(frozen=True, slots=True)
class Start:
    """brokerd started: the grants it read and the workspace it serves."""

    TAG: ClassVar[str] = "start"
    time: str = field(metadata=wire(TIME))
    grants: str = field(metadata=wire(STR))
    workspace: str = field(metadata=wire(STR))
    # True from the brokerd that logs every listed MCP tool's request with its `row` (absent in
    # older logs): verify then refuses an MCP request that lacks one and is not denied.
    rows: bool | None = field(default=None, metadata=wire(BOOL_OR_ABSENT))


@dataclass(frozen=True, slots=True)
class Request:
    """One call as loopd sent it, its canonical arguments and the hash an approval binds."""

    TAG: ClassVar[str] = "request"
    time: str = field(metadata=wire(TIME))
    id: str = field(metadata=wire(STR))
    session: str = field(metadata=wire(STR))
    epoch: int = field(metadata=wire(UINT))
    tool: str = field(metadata=wire(STR))
    arguments: str = field(metadata=wire(STR))
    canonical: str = field(metadata=wire(STR))
    hash: str = field(metadata=wire(STR))
    # A row known only at run time (an MCP tool's): the facts of it the decision read, so that
    # `brokerd verify` decides the call again without its server (mcp/rows.py, row_facts).
    row: JsonObj | None = field(default=None, metadata=wire(OBJECT_OR_ABSENT))
    # A denied call's arguments over policy.DENIED_ARGS_CHARS are logged cut to it: `size` is
    # their whole size in bytes (the hash is the whole call's). Absent: logged whole.
    size: int | None = field(default=None, metadata=wire(UINT_OR_ABSENT))


@dataclass(frozen=True, slots=True)
class Decision:
    """What the grants (and the taint) decided: allow, ask or deny, and why."""

    TAG: ClassVar[str] = "decision"
    time: str = field(metadata=wire(TIME))
    id: str = field(metadata=wire(STR))
    mode: str = field(metadata=wire(STR))
    reason: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class Approval:
    """The owner's answer to an asked call (or why there was none), bound to the call's hash."""

    TAG: ClassVar[str] = "approval"
    time: str = field(metadata=wire(TIME))
    id: str = field(metadata=wire(STR))
    hash: str = field(metadata=wire(STR))
    answer: str = field(metadata=wire(STR))
    mode: str = field(metadata=wire(STR))
    # An answer from the chat (brokerd's chat socket, docs/gateway.md): the Mattermost post that
    # gave it and its user id, as gatewayd relayed them. Absent: answered on the box.
    post_id: str | None = field(default=None, metadata=wire(STR_OR_ABSENT))
    user_id: str | None = field(default=None, metadata=wire(STR_OR_ABSENT))


@dataclass(frozen=True, slots=True)
class Grant:
    """A rule the owner's "always" added to the grants."""

    TAG: ClassVar[str] = "grant"
    time: str = field(metadata=wire(TIME))
    rule: JsonObj = field(metadata=wire(OBJECT))


@dataclass(frozen=True, slots=True)
class GrantRefused:
    """An "always" that added nothing, and why (the grants file cannot express or take it)."""

    TAG: ClassVar[str] = "grant_refused"
    time: str = field(metadata=wire(TIME))
    id: str = field(metadata=wire(STR))
    reason: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class Result:
    """What a call that ran gave back (its size and kind, never its content)."""

    TAG: ClassVar[str] = "result"
    time: str = field(metadata=wire(TIME))
    id: str = field(metadata=wire(STR))
    error: bool = field(metadata=wire(BOOL))
    truncated: bool = field(metadata=wire(BOOL))
    chars: int = field(metadata=wire(UINT))
    untrusted: bool = field(metadata=wire(BOOL))
    host: str | None = field(metadata=wire(OPT_STR))
    class_: str = field(metadata=wire(STR, "class"))


@dataclass(frozen=True, slots=True)
class Carry:
    """The first line of a file after a rotation: the file before it, and the taint ledger's
    snapshot, so brokerd reads only this file at start."""

    TAG: ClassVar[str] = "carry"
    time: str = field(metadata=wire(TIME))
    from_: str = field(metadata=wire(STR, "from"))
    ledger: JsonObj = field(metadata=wire(OBJECT))


DecisionRecord = Start | Request | Decision | Approval | Grant | GrantRefused | Result | Carry
RECORD_TYPES: dict[str, type[Any]] = {
    cls.TAG: cls for cls in (Start, Request, Decision, Approval, Grant, GrantRefused, Result, Carry)
}
_HEAD = ("type", "seq", "prev")


def record(kind: str, fields: JsonObj) -> DecisionRecord:
    """The typed record of kind `kind` from its fields as they go on the wire.

    Raises:
        RecordError: an unknown kind, a missing or extra field, a value of the wrong type.
    """
    cls = RECORD_TYPES.get(kind)
    if cls is None:
        raise RecordError(
            f"type: expected a decision record ({', '.join(RECORD_TYPES)}), got {quote(kind)}"
        )
    try:
        return from_obj(cls, fields, kind)  # type: ignore[no-any-return]
    except BodyError as exc:
        raise RecordError(str(exc)) from None


def encode_line(rec: DecisionRecord, seq: int, prev: str) -> bytes:
    """One line, newline included.

    Raises:
        EncodeError: not a decision record, or a field breaks its type.
    """
    if type(rec) not in RECORD_TYPES.values():
        raise EncodeError(f"record: expected a decision record, got {type(rec).__name__}")
    head: JsonObj = {
        "type": rec.TAG,
        "seq": UINT.encode(seq, "seq"),
        "prev": HEX64.encode(prev, "prev"),
    }
    return orjson.dumps(to_obj(rec, rec.TAG, into=head), option=orjson.OPT_APPEND_NEWLINE)


@dataclass(frozen=True, slots=True)
class Logged:
    """A record as the log holds it: its line's seq, and the typed record (what brokerd's ledger
    and replay read)."""

    seq: int
    record: DecisionRecord


def decode_line(line: bytes) -> tuple[int, str, JsonObj]:
    """A line's seq, prev and whole object (what bxctl's readers of the log take), strictly.

    Raises:
        RecordError: torn, not JSON, an unknown type, a field missing, extra or of the wrong
            type, or not spelt the way encode_line spells it.
    """
    seq, prev, obj, _ = _decode(line)
    return seq, prev, obj


def decode_record(line: bytes) -> tuple[int, str, Logged]:
    """A line's seq, prev and typed record, as strictly as decode_line.

    Raises:
        RecordError: as decode_line.
    """
    seq, prev, _, rec = _decode(line)
    return seq, prev, Logged(seq, rec)


def _decode(line: bytes) -> tuple[int, str, JsonObj, DecisionRecord]:
    if not line.endswith(b"\n"):
        raise RecordError("line: no newline at the end; an incomplete line (a torn write?)")
    obj = load_json_object(line[:-1], "the record", lambda m: RecordError(f"line: {m}"))
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise RecordError('line: missing key "type" or not a string')
    try:
        seq = UINT.decode(obj.get("seq"), "seq")
        prev = HEX64.decode(obj.get("prev"), "prev")
    except BodyError as exc:
        raise RecordError(str(exc)) from None
    rec = record(kind, {k: v for k, v in obj.items() if k not in _HEAD})
    if encode_line(rec, seq, prev) != line:
        raise RecordError("line: not in the canonical form brokerd writes (edited?)")
    return seq, prev, obj, rec
