"""The one hash-chain walk of every log (no I/O): the session log's (`log.verify_log`) and
brokerd's decision log (`session.chain.verify_chain`, behind `brokerd verify` and `bxctl
verify-broker`). Each line is decoded by the log's own decoder; the walk checks that `seq`
counts on from `first_seq`, that each `prev` is the hex SHA-256 of the line before (the first
one `first_prev`), and that the last line is whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .errors import RecordError
from .hash import sha256_hex

GENESIS_PREV = "0" * 64
T = TypeVar("T")


def walk_chain(
    data: bytes,
    decode: Callable[[bytes], tuple[int, str, T]],
    first_seq: int = 0,
    first_prev: str = GENESIS_PREV,
    first_what: str | None = None,
) -> tuple[list[T], str]:
    """The decoded entries, and the `prev` of the line after the last.

    Args:
        decode: one line (newline included) -> its seq, prev and entry; RecordError if bad.
        first_what: how the message names `first_prev` when the first line breaks it.

    Raises:
        RecordError: "line N: ..." (N from 1) at the first line that fails.
    """
    entries: list[T] = []
    prev = first_prev
    start = 0
    while start < len(data):
        n = len(entries) + 1
        end = data.find(b"\n", start)
        if end < 0:
            raise RecordError(
                f"line {n}: no newline at the end; the last line is incomplete (a torn write?)"
            )
        line = data[start : end + 1]
        try:
            seq, got_prev, entry = decode(line)
        except RecordError as e:
            raise RecordError(f"line {n}: {str(e).removeprefix('line: ')}") from None
        if seq != first_seq + n - 1:
            raise RecordError(
                f"line {n}: seq is {seq}, expected {first_seq + n - 1} "
                "(a line is missing, repeated or out of order)"
            )
        if got_prev != prev:
            what = f"the hash of line {n - 1}, {prev}"
            if n == 1:
                what = first_what or ("64 zeros" if prev == GENESIS_PREV else prev)
            raise RecordError(
                f"line {n}: prev is {got_prev}, expected {what} (the log was edited or reordered)"
            )
        entries.append(entry)
        prev = sha256_hex(line)
        start = end + 1
    return entries, prev
