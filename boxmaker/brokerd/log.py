"""brokerd's decision log: one line per request, decision, approval, added grant and result,
each written whole and fsync'd before brokerd acts on it. An append that fails (a short write
under a file-size limit, ENOSPC, EFBIG, EIO) is cut back to the last whole line, fsync'd, and
raises LogError naming the file: the broker refuses the call, and the log stays one a restart
opens without a hand edit (a torn last line, left by a kill mid-write, is cut at open). The chain is
session.chain's, the replay policy.py's. The file is opened once, flock'd (one brokerd per
log), checked whole, and continued. `listener` (the broker's taint Ledger) is fed every
record, the past ones at open and each new one under the same lock as its write, so what it
holds is always the log's order.
"""

from __future__ import annotations

import contextlib
import errno
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
        self._torn = False  # a failed append's bytes are still there (its cut-back failed)
        self.size = tail  # the end of the last whole line: where a failed append is cut back
        self.seq = len(records)
        self.lock = threading.RLock()  # the broker holds it across a decision and its request
        self.path = path
        self._listener = listener
        if listener is not None:
            for rec in records:
                listener(rec)

    def append(self, kind: str, **fields: Any) -> None:
        """Writes one record and fsyncs it; LogError (and nothing of it left) when it cannot."""
        with self.lock:
            rec = {"time": now(), **fields}
            line = encode_line(kind, self.seq, self.prev, rec)
            try:
                if self._torn:
                    self._cut_back()
                written = os.write(self.fd, line)
                if written != len(line):  # O_APPEND: the rest would not fit (RLIMIT_FSIZE, ENOSPC)
                    raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
                os.fsync(self.fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    self._cut_back()
                raise LogError(
                    f"{self.path}: the {kind} line cannot be written ({exc.strerror or exc}); "
                    "nothing runs until it can (free space, or raise the file-size limit)"
                ) from None
            self.size += len(line)
            if self._listener is not None:
                self._listener({"type": kind, "seq": self.seq, **rec})
            self.seq += 1
            self.prev = sha256_hex(line)

    def _cut_back(self) -> None:
        # What a failed write left is never a record: cut it so the next line follows a whole one.
        self._torn = True
        os.ftruncate(self.fd, self.size)  # raises: the next append (or open) tries again
        os.fsync(self.fd)
        self._torn = False

    def close(self) -> None:
        os.close(self.fd)


__all__ = ["DecisionLog", "LogError"]
