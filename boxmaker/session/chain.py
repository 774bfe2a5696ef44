"""Hash-chained JSON-lines logs whose records are not the session's: brokerd's decision log. [core]

The chain is the session log's (proto/log.py): each line is one JSON object ending in b"\\n",
`{"type": ..., "seq": n, "prev": <hex SHA-256 of the line before>, ...fields}`, `seq` from 0, the
first `prev` 64 zeros, and a line must be exactly the bytes `encode_line` writes for it. The
record kinds and their meaning are the writer's; this module checks only the chain, so
`bxctl verify-broker` can check a log without knowing brokerd (and `brokerd verify` replays it).
"""

from __future__ import annotations

from typing import Any

import orjson

from boxmaker.proto.hash import sha256_hex

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
    on from the file before).

    Raises:
        ChainError: at the first line that is torn, not JSON, out of sequence, linked to another
            line, or not written the way `encode_line` writes it.
    """
    records: list[dict[str, Any]] = []
    for n, line in enumerate(data.splitlines(keepends=True), 1):
        if not line.endswith(b"\n"):
            raise ChainError(f"line {n}: incomplete (a torn write?)")
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ChainError(f"line {n}: not JSON") from None
        if not isinstance(obj, dict) or obj.get("seq") != seq + n - 1 or obj.get("prev") != prev:
            raise ChainError(f"line {n}: seq or prev breaks the chain (edited, cut or reordered)")
        fields = {k: v for k, v in obj.items() if k not in _HEAD}
        if encode_line(str(obj.get("type")), seq + n - 1, prev, fields) != line:
            raise ChainError(f"line {n}: not written the way the log's writer writes lines")
        records.append(obj)
        prev = sha256_hex(line)
    return records, prev
