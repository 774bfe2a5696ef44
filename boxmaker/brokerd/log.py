"""brokerd's decision log: one line per request, decision, approval, added grant and result,
each written whole and fsync'd before brokerd acts on it. An append that fails (a short write
under a file-size limit, ENOSPC, EFBIG, EIO) is cut back to the last whole line, fsync'd, and
raises LogError naming the file: the broker refuses the call, and the log stays one a restart
opens without a hand edit (a torn last line, left by a kill mid-write, is cut at open).

The chain is session.chain's, the replay policy.py's. The file is opened once, flock'd (one
brokerd per log), checked, and continued. `ledger` (the broker's taint Ledger) is fed every
record, the past ones at open and each new one under the same lock as its write, so what it
holds is always the log's order.

Rotation: once the file passes `rotate_bytes`, it becomes `<log>.<n>` (n = 1, 2, ...) and a new
`<log>` goes on with the same chain (seq and prev continue across files, as one log cut in
pieces: `read_chain` gives the whole of it to the verifiers). The new file's first line is a
`carry` record holding the ledger's snapshot, so at open brokerd reads only the current file, a
bounded read, and still knows every session's taint. The steps are ordered so that a crash
between any two leaves a state the next open completes: the new file is written whole as
`<log>.next` first, then `<log>` is renamed to its number, then `.next` to `<log>`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, Protocol

import orjson

from boxmaker.brokerd.ledger import MAX_CARRY_BYTES
from boxmaker.brokerd.ledger import Ledger as TaintLedger
from boxmaker.brokerd.policy import LogError
from boxmaker.proto import decision
from boxmaker.proto.hash import sha256_hex
from boxmaker.session.chain import GENESIS_PREV, ChainError, verify_records
from boxmaker.session.chain_files import archives, read_chain

DEFAULT_ROTATE_BYTES = 16 << 20
MAX_CARRY_LINE = MAX_CARRY_BYTES + 4096  # a carry line: its ledger and its head
OLD_PIECE_BYTES = 16 << 20  # an over-bound file at start is read this much at a time
MAX_LINE_BYTES = 4 << 20  # a request carries at most a 1 MiB frame's arguments, twice, escaped
CARRY = decision.Carry.TAG
P = ParamSpec("P")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Ledger(Protocol):
    def feed(self, line: decision.Logged) -> None: ...
    def snapshot(self) -> dict[str, Any]: ...
    def restore(self, snap: dict[str, Any]) -> None: ...


class DecisionLog:
    def __init__(
        self, path: str, ledger: Ledger | None = None, rotate_bytes: int = DEFAULT_ROTATE_BYTES
    ) -> None:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        self.path = path
        self.rotate_bytes = rotate_bytes
        self._ledger = ledger
        self.lock = threading.RLock()  # the broker holds it across a decision and its request
        self._finish_rotation()
        self.fd = self._open_locked(path, os.O_CREAT)
        try:
            self._load()
        except BaseException:
            os.close(self.fd)
            raise

    @staticmethod
    def _open_locked(path: str, create: int) -> int:
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | create
        fd = os.open(path, flags | os.O_NONBLOCK, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device: never a log
            os.close(fd)
            raise LogError(f"{path}: not a regular file (move it away)")
        os.set_blocking(fd, True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogError(f"{path}: another brokerd holds this log") from None
        return fd

    def _finish_rotation(self) -> None:
        """A `.next` left by a crash: put in place if `<log>` was already renamed, else dropped
        (the rotation is made again once the file is over its bound)."""
        nxt = f"{self.path}.next"
        if not os.path.lexists(nxt):
            return
        if os.path.lexists(self.path):
            os.unlink(nxt)
        else:
            os.rename(nxt, self.path)
        _fsync_folder(self.path)

    def _load(self) -> None:
        size = os.fstat(self.fd).st_size
        if size > self.rotate_bytes + MAX_LINE_BYTES + MAX_CARRY_LINE:
            self._load_old(size)  # a log from before rotation, or a bound lowered since
            return
        data = os.pread(self.fd, size, 0)
        tail = data.rfind(b"\n") + 1
        if tail < len(data):  # a torn last line (killed mid-write): never fsync'd, never acted on
            os.ftruncate(self.fd, tail)
            data = data[:tail]
        seq, prev = self._start_of(data)
        try:
            records, self.prev = verify_records(data, seq, prev)
        except ChainError as exc:
            raise LogError(f"{self.path}: {exc}") from None
        self._torn = False  # a failed append's bytes are still there (its cut-back failed)
        self.size = tail  # the end of the last whole line: where a failed append is cut back
        self.seq0 = self.seq = seq
        self.seq = seq + len(records)
        carried = records and isinstance(records[0].record, decision.Carry)
        self.head = data.index(b"\n") + 1 if carried else 0
        self._feed(records)

    def _feed(self, records: list[decision.Logged]) -> None:
        if self._ledger is None:
            return
        for line in records:
            if isinstance(line.record, decision.Carry):
                try:
                    self._ledger.restore(line.record.ledger)
                except LogError as exc:
                    raise LogError(f"{self.path}: line {line.seq - self.seq0 + 1}: {exc}") from None
            self._ledger.feed(line)

    def _load_old(self, size: int) -> None:
        """A file over what brokerd reads at start: checked and fed in pieces (never whole in
        memory), then rotated at once, so the next start reads only the new file."""
        data = os.pread(self.fd, min(size, OLD_PIECE_BYTES), 0)
        seq, prev = self._start_of(data)
        self.seq0 = seq
        at, n = 0, 0
        while at < size:
            piece = os.pread(self.fd, min(size - at, OLD_PIECE_BYTES), at)
            end = piece.rfind(b"\n") + 1
            if end == 0:
                if at + len(piece) < size:
                    raise LogError(f"{self.path}: a line over {OLD_PIECE_BYTES} bytes at byte {at}")
                break  # a torn last line: cut below
            try:
                records, prev = verify_records(piece[:end], seq + n, prev)
            except ChainError as exc:
                raise LogError(f"{self.path}: {_shifted(str(exc), n)}") from None
            self.seq = seq + n
            self._feed(records)
            n += len(records)
            at += end
        if at < size:  # a torn last line (killed mid-write): never fsync'd, never acted on
            os.ftruncate(self.fd, at)
        self._torn = False
        self.size, self.seq, self.prev, self.head = at, seq + n, prev, 0
        self._rotate()

    def _start_of(self, data: bytes) -> tuple[int, str]:
        """Where this file's chain begins: 0 and the genesis for the first file; for a later one
        its first line's own seq and prev (checked against the file before by `verify`)."""
        if not data:
            olds = archives(self.path)
            return (0, GENESIS_PREV) if not olds else self._end_of(olds[-1])
        first = orjson.loads(data[: data.index(b"\n") + 1])
        if first.get("type") != CARRY:
            return 0, GENESIS_PREV
        return int(first["seq"]), str(first["prev"])

    def _end_of(self, path: str) -> tuple[int, str]:
        raise LogError(
            f"{self.path}: empty, but {path} is there: a rotation was cut short; move "
            f"{path} back to {self.path}"
        )

    def append(
        self,
        make: Callable[Concatenate[str, P], decision.DecisionRecord],
        *args: P.args,
        **fields: P.kwargs,
    ) -> None:
        """Writes the record `make(<the time now>, *args, **fields)` (a record type of
        proto.decision, or what builds one) and fsyncs it; LogError (and nothing of it left)
        when it cannot. The time is taken under the lock, so the lines' times keep their order."""
        with self.lock:
            if self.size - self.head >= self.rotate_bytes:  # the carry never counts: its size
                self._rotate()  # is bounded apart (ledger.MAX_CARRY_BYTES)
            rec = make(now(), *args, **fields)
            # EncodeError: a bug here, not loopd's input
            self._write(decision.encode_line(rec, self.seq, self.prev), rec.TAG)
            if self._ledger is not None:
                self._ledger.feed(decision.Logged(self.seq, rec))
            self.seq += 1

    def _write(self, line: bytes, kind: str) -> None:
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
        self.prev = sha256_hex(line)

    def _rotate(self) -> None:
        """The current file becomes `<log>.<n>`; a new one goes on from a `carry` record."""
        olds = archives(self.path)
        number = 1 + (int(olds[-1].rsplit(".", 1)[1]) if olds else 0)
        snap = (self._ledger or TaintLedger()).snapshot()
        frm = f"{os.path.basename(self.path)}.{number}"
        line = decision.encode_line(decision.Carry(now(), frm, snap), self.seq, self.prev)
        nxt = f"{self.path}.next"
        try:
            fd = self._open_locked(nxt, os.O_CREAT | os.O_EXCL)
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(errno.ENOSPC, "short write")
                os.fsync(fd)
                os.rename(self.path, f"{self.path}.{number}")
                os.rename(nxt, self.path)
                _fsync_folder(self.path)
            except BaseException:
                os.close(fd)
                raise
        except OSError as exc:
            with contextlib.suppress(OSError):
                if os.path.lexists(self.path):
                    os.unlink(nxt)
            raise LogError(
                f"{nxt}: cannot rotate the log ({exc.strerror or exc}); nothing runs until it can"
            ) from None
        os.close(self.fd)
        self.fd, self.size, self.head = fd, len(line), len(line)
        self.seq += 1
        self.prev = sha256_hex(line)
        if self._ledger is not None:
            self._ledger.restore(snap)  # as a restart would: live, restarted and replay agree

    def _cut_back(self) -> None:
        # What a failed write left is never a record: cut it so the next line follows a whole one.
        self._torn = True
        os.ftruncate(self.fd, self.size)  # raises: the next append (or open) tries again
        os.fsync(self.fd)
        self._torn = False

    def close(self) -> None:
        os.close(self.fd)


def _shifted(message: str, n: int) -> str:
    """A piece's "line N" as the file's line."""
    return re.sub(r"\bline ([0-9]+)\b", lambda m: f"line {int(m.group(1)) + n}", message)


def _fsync_folder(path: str) -> None:
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["DecisionLog", "LogError", "archives", "read_chain"]
