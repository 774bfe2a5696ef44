"""brokerd's decision log: one line per request, decision, approval, added grant and result,
each written with one write() and fsync'd before brokerd acts on it. The chain is
session.chain's, the replay policy.py's. The file is opened once, flock'd (one brokerd per
log), checked whole, and continued. `listener` (the broker's taint Ledger) is fed every
record, the past ones at open and each new one under the same lock as its write, so what it
holds is always the log's order.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from boxmaker.brokerd.policy import LogError
from boxmaker.proto.hash import sha256_hex
from boxmaker.session.chain import ChainError, encode_line, verify_chain


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class DecisionLog:
    def __init__(self, path: str, listener: Callable[[dict[str, Any]], None] | None = None) -> None:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        self.fd = os.open(
            path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise LogError(f"{path}: another brokerd holds this log") from None
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, size, 0)
        tail = data.rfind(b"\n") + 1
        if tail < len(data):  # a torn last line (killed mid-write): never fsync'd, never acted on
            os.ftruncate(self.fd, tail)
            data = data[:tail]
        try:
            records, self.prev = verify_chain(data)
        except ChainError as exc:
            os.close(self.fd)
            raise LogError(f"{path}: {exc}") from None
        self.seq = len(records)
        self.lock = threading.RLock()  # the broker holds it across a decision and its request
        self.path = path
        self._listener = listener
        if listener is not None:
            for rec in records:
                listener(rec)

    def append(self, kind: str, **fields: Any) -> None:
        with self.lock:
            rec = {"time": now(), **fields}
            line = encode_line(kind, self.seq, self.prev, rec)
            os.write(self.fd, line)
            os.fsync(self.fd)
            if self._listener is not None:
                self._listener({"type": kind, "seq": self.seq, **rec})
            self.seq += 1
            self.prev = sha256_hex(line)

    def close(self) -> None:
        os.close(self.fd)


__all__ = ["DecisionLog", "LogError"]
