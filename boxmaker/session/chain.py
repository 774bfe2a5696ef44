"""Hash-chained JSON-lines logs whose records are not the session's: brokerd's decision log. [core]

The chain is the session log's (proto/log.py, one walk in proto/chain.py): each line is one JSON
object ending in b"\\n",
`{"type": ..., "seq": n, "prev": <hex SHA-256 of the line before>, ...fields}`, `seq` from 0, the
first `prev` 64 zeros, and a line must be exactly the bytes `encode_line` writes for it. The
record kinds and their meaning are the writer's; this module checks only the chain, so
`bxctl verify-broker` can check a log without knowing brokerd (and `brokerd verify` replays it).
"""

from __future__ import annotations

from typing import Any

import orjson

from boxmaker.proto.chain import walk_chain
from boxmaker.proto.decision import Logged, decode_line, decode_record
from boxmaker.proto.errors import RecordError

GENESIS_PREV = "0" * 64
_HEAD = ("type", "seq", "prev")


class ChainError(Exception):
    """The log fails its chain; "line N: ..." says where (N from 1)."""


def encode_line(kind: str, seq: int, prev: str, fields: dict[str, Any]) -> bytes:
    """One line, newline included: the head, then `fields` in their order."""
    return orjson.dumps({"type": kind, "seq": seq, "prev": prev, **fields},
                        option=orjson.OPT_APPEND_NEWLINE)  # fmt: skip


def verify_chain(
    data: bytes, seq: int = 0, prev: str = GENESIS_PREV
) -> tuple[list[dict[str, Any]], str]:
    """The records (each line's object), and the `prev` of the line after the last. `seq` and
    `prev` are the first line's (a later file of a log rotated into several, whose chain goes
    on from the file before). Each line must be a decision record as proto.decision types it;
    the walk is proto.chain's, the session log's too.

    Raises:
        ChainError: at the first line that is torn, not JSON, not a decision record, out of
            sequence, linked to another line, or not written the way brokerd writes it.
    """
    try:
        return walk_chain(data, _record, seq, prev)
    except RecordError as exc:
        raise ChainError(str(exc)) from None


def verify_records(data: bytes, seq: int = 0, prev: str = GENESIS_PREV) -> tuple[list[Logged], str]:
    """verify_chain's walk and checks, giving each line's typed record with its seq (what
    brokerd's ledger and replay read).

    Raises:
        ChainError: as verify_chain.
    """
    try:
        return walk_chain(data, decode_record, seq, prev)
    except RecordError as exc:
        raise ChainError(str(exc)) from None


def _record(line: bytes) -> tuple[int, str, dict[str, Any]]:
    return decode_line(line)
