"""The session store: `<home>/sessions/<id>/0.baseline.json` and `0.jsonl`, one writer each.

Rules (M2b brief section 2, DECISIONS.md "Sessions"):
- The id is checked (`proto.ids`) before any path is built from it.
- Folders are 0700, files 0600, set exactly whatever the umask. A folder is fsynced when a file or
  folder is created in it, so a new session survives a power cut once `create` returns.
- One writer, enforced by the kernel: an open log holds an exclusive, non-blocking `flock` on
  `0.jsonl` until it is closed. flock belongs to the open file description, so a second `open`
  in the same process conflicts just as one in another process does, and the lock dies with its
  process. A second opener gets SessionBusy at once and never writes.
- An append is one `os.write` of the whole line, then `os.fsync`, before `append` returns (so
  before the event that reports it goes out). A short write, or an error at write or fsync, is
  cut back (ftruncate to the size before the append, fsync) and reported as AppendFailed:
  nothing is left half-written. After a failed fsync the kernel may already have dropped the
  dirty pages, so the next append first reopens the log from disk and checks all of it; a log
  that cannot be cut back or reopened stays closed, and every later append says why.
- `open` reads and checks everything (`check.check_session`): a log that fails is refused with
  the file, the line and the fault, and nothing is repaired. Both files are read as every home
  file is (`files.read_regular`: no final symlink, regular only, a size bound).
- Before every append the log's path must still name the open file (device, inode): else a log
  replaced under a live writer (an editor's save, a restore) takes acknowledged records into an
  unlinked file. LogReplaced: nothing written, the log closed, the next open checks the new file.

`create` builds the session's folder under a hidden name and renames it into place complete, its
log already locked, so nobody ever sees a session without its first line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from boxmaker.proto import (
    GENESIS_PREV,
    EpochEnd,
    SessionStart,
    encode_line,
    next_prev,
)
from boxmaker.proto.log import LogRecord

from . import crashpoint, epoch_files
from .baseline import Baseline
from .check import CheckedLog
from .errors import (
    AppendFailed,
    LogCorrupt,
    LogReplaced,
    NotARegularFile,
    SessionError,
    SessionExists,
)
from .files import (
    DIR_MODE,
    FileOps,
    create_file,
    ensure_dir,
    errno_name,
    fsync_dir,
    open_regular,
    read_bounded,
    write_all,
)
from .paths import (
    BASELINE_NAME,
    LOG_MAX_BYTES,
    LOG_NAME,
    existing_session_dir,
    identity,
    identity_at,
    open_locked,
    session_dir,
)


class SessionStore:
    """The sessions under one home. `ops` is the seam the fault tests fail an append through."""

    def __init__(self, home: Path, *, ops: FileOps = os) -> None:
        self.home = home
        self._ops = ops

    def exists(self, session_id: str) -> bool:
        """Whether the session's folder exists (so `create` would raise SessionExists)."""
        return session_dir(self.home, session_id).is_dir()

    def create(self, session_id: str, baseline: Baseline, *, slot: int, time: str) -> SessionLog:
        """Creates the session: `0.baseline.json`, then `0.jsonl` with its `session_start`.

        The folder is built under a hidden name (`.<id>.<pid>.<random>.new`, which no id can
        be) and renamed into place complete, with the log already locked: nobody ever sees a
        session without its first line, and an open racing the create gets SessionBusy or
        NoSuchSession, never a half-made session.

        Returns the log, open and locked.

        Raises:
            SessionIdError: a bad id, before anything is touched.
            EncodeError: a bad baseline, slot or time, before anything is touched.
            SessionExists: the session's folder already exists.
            SessionError: the files could not be written; what was made is removed again.
        """
        path = session_dir(self.home, session_id)
        baseline_bytes = baseline.to_bytes()
        start = SessionStart(time, session_id, 0, slot, baseline.hash)
        line = encode_line(start, 0, GENESIS_PREV)
        sessions = path.parent
        ensure_dir(sessions)
        if path.exists():
            raise SessionExists(f"session {session_id} already exists ({path})")
        tmp = sessions / f".{session_id}.{os.getpid()}.{secrets.token_hex(4)}.new"
        fd = -1
        try:
            os.mkdir(tmp, DIR_MODE)
            os.chmod(tmp, DIR_MODE)
            fd = create_file(tmp / LOG_NAME)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else knows the file yet
            bfd = create_file(tmp / BASELINE_NAME)
            try:
                write_all(bfd, baseline_bytes)
                os.fsync(bfd)
            finally:
                os.close(bfd)
            if os.write(fd, line) != len(line):
                raise OSError(errno.ENOSPC, "short write")
            os.fsync(fd)
            fsync_dir(tmp)
            try:
                os.rename(tmp, path)  # fails on a folder with files in it: another create won
            except OSError as e:
                if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise SessionExists(f"session {session_id} already exists ({path})") from None
                raise
            fsync_dir(sessions)
        except OSError as e:
            _undo_create(fd, tmp)
            raise SessionError(f"{path}: cannot create the session: {e.strerror or e}") from e
        except BaseException:
            _undo_create(fd, tmp)
            raise
        checked = CheckedLog(baseline, start, (start,), 1, next_prev(line))
        return SessionLog(fd, session_id, path, checked, len(line), ops=self._ops)

    def open(self, session_id: str) -> SessionLog:
        """Opens an existing session to append to it, after checking all of it.

        Raises:
            SessionIdError: a bad id, before anything is touched.
            NoSuchSession: the session's folder does not exist.
            SessionBusy: the log is open elsewhere (this process or another).
            LogCorrupt: the log or its baseline file is refused; the message names file and line.
        """
        path = existing_session_dir(self.home, session_id)
        fd = open_locked(session_id, path)
        try:  # every epoch checked, a committed switch rolled forward (epoch_files)
            current, epoch_fd = epoch_files.open_current(session_id, path)
        except BaseException:
            os.close(fd)
            raise
        log = SessionLog(fd, session_id, path, current.checked, current.size, ops=self._ops)
        if current.n:
            log.enter_epoch(current.n, epoch_fd, current.checked, current.size, current.link)
        return log


class SessionLog:
    """An open, locked session log. `close()` (or leaving a `with` block) releases the lock."""

    def __init__(
        self,
        fd: int,
        session_id: str,
        path: Path,
        checked: CheckedLog,
        size: int,
        *,
        ops: FileOps = os,
    ) -> None:
        self._fd = fd
        self._identity = identity(fd)  # what the log's path must still name at every append
        # After a reopen the first descriptor stays open only to hold the flock (it belongs to
        # the open file description), so no other writer can slip in between close and relock.
        self._lock_fd = -1
        self._ops = ops
        self._stale = False  # an fsync failed: reopen from disk before the next append
        self._shut: str | None = None  # why the log was closed for good, for later appends
        self.session_id = session_id
        self.path = path  # the session's folder
        self.baseline = checked.baseline
        self._records = list(checked.records)
        self._view: tuple[LogRecord, ...] | None = checked.records
        self._next_seq = checked.next_seq
        self._next_prev = checked.next_prev
        self._size = size
        self.epoch, self.link = 0, GENESIS_PREV  # the epoch, its first prev; lock on 0.jsonl

    @property
    def log_path(self) -> Path:
        return self.path / f"{self.epoch}.jsonl"

    next_link = property(lambda self: self._next_prev, doc="the prev of the next line")

    def enter_epoch(self, epoch: int, fd: int, checked: CheckedLog, size: int, link: str) -> None:
        """Moves appends to epoch `epoch`'s log, open on `fd` (`epoch_files.switch`, `open`)."""
        old, self._fd = self._fd, fd
        self._identity = identity(fd)  # appends now check the new epoch's file
        if self._lock_fd < 0:
            self._lock_fd = old  # 0.jsonl's open file description holds the flock
        else:
            os.close(old)
        self.epoch, self.link, self.baseline = epoch, link, checked.baseline
        self._records, self._view = list(checked.records), checked.records
        self._next_seq, self._next_prev, self._size = checked.next_seq, checked.next_prev, size

    @property
    def records(self) -> Sequence[LogRecord]:
        """Every record of the log, `session_start` first."""
        if self._view is None:
            self._view = tuple(self._records)
        return self._view

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def append(self, record: LogRecord) -> None:
        """Appends one record durably: one write of the whole line, then fsync, then returns.

        Raises:
            EncodeError: the record breaks its types; nothing was written.
            AppendFailed: the write or fsync failed (or was short). The file was cut back to its
                last whole line; after a failed fsync the next append reopens and checks it first.
                If the cut failed, the log is closed.
            SessionError: the log is closed (the message says why if the store closed it), the
                record is a session_start, or the reopen after a failed fsync was refused.
        """
        if self._fd < 0:
            why = f": {self._shut}" if self._shut else ""
            raise SessionError(f"{self.log_path}: the log is closed{why}")
        if type(record) is SessionStart:
            raise SessionError(f"{self.log_path}: only create writes a session_start")
        if type(self._records[-1]) is EpochEnd:  # issue 29.1: nothing ever follows one
            raise SessionError(f"{self.log_path}: closed by its epoch_end; nothing was written")
        line = encode_line(record, self._next_seq, self._next_prev)
        if self._size + len(line) > LOG_MAX_BYTES:
            raise SessionError(
                f"{self.log_path}: full: this record would pass {LOG_MAX_BYTES:,} bytes, the most "
                "a log may hold; nothing was written (start a new session)"
            )
        self._check_identity()
        if self._stale:
            self._reopen()
        step = "write"
        crashpoint.reached("append_before_write")
        try:
            written = self._ops.write(self._fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, f"short write, {written} of {len(line)} bytes")
            crashpoint.reached("append_after_write")
            step = "fsync"
            self._ops.fsync(self._fd)
        except OSError as e:
            self._cut_back(step, e)
        crashpoint.reached("append_after_fsync")
        self._records.append(record)
        self._view = None
        self._next_seq += 1
        self._next_prev = next_prev(line)
        self._size += len(line)

    def _check_identity(self) -> None:
        """Raises LogReplaced, and closes the log, when its path names another file now."""
        try:
            now = identity_at(self.log_path)
        except OSError as e:  # the folder cannot be searched any more: as good as gone
            now, why = None, errno_name(e)
        else:
            why = "nothing is there" if now is None else "another file is there"
        if now == self._identity:
            return
        self._close_for_good(
            f"{self.log_path} was replaced while this session was open ({why}: an editor's "
            "save, a move over it, a restore?); nothing more is written to the old file"
        )
        raise LogReplaced(
            f"{self._shut}; this record was not written and this turn is not acknowledged. The "
            "next turn opens and checks the file now at that path (`bxctl verify` it first)"
        )

    def _cut_back(self, step: str, e: OSError) -> NoReturn:
        """Cuts the file back to the size before the append, then raises AppendFailed."""
        what = f"{self.log_path}: the disk failed: {step} of line {self._next_seq + 1} failed"
        try:
            self._ops.ftruncate(self._fd, self._size)
        except OSError as cut:
            self._close_for_good(
                f"after a failed {step}, cutting back the partial line failed too "
                f"({errno_name(cut)}); open the session again: a torn last line is refused there "
                "and `bxctl repair` cuts it"
            )
            raise AppendFailed(f"{what} with {errno_name(e)}; {self._shut}") from e
        try:
            self._ops.fsync(self._fd)
        except OSError:
            self._stale = True  # the cut may not be on disk yet: check it before the next append
        if step == "fsync":
            self._stale = True
        raise AppendFailed(
            f"{what} with {errno_name(e)}; nothing partial was kept: the log was cut back to its "
            f"last whole line (line {self._next_seq}, the last one acknowledged)"
        ) from e

    def _reopen(self) -> None:
        """Opens the log again from disk and checks all of it, keeping the lock throughout.

        What is on disk must end exactly at the last acknowledged line; else the log is closed.
        """
        where = f"{self.log_path}: reopening after a failed fsync"
        try:
            fd = open_regular(self.log_path, os.O_RDWR | os.O_APPEND)
        except (OSError, SessionError) as e:
            why = errno_name(e) if isinstance(e, OSError) else str(e)
            self._close_for_good(f"{where}: cannot open it: {why}")
            raise SessionError(f"{self.log_path}: the log is closed: {self._shut}") from e
        try:
            if identity(fd) != self._identity:
                raise LogCorrupt(f"{self.log_path}: was replaced by another file meanwhile")
            data = read_bounded(fd, LOG_MAX_BYTES, str(self.log_path))
            checked = epoch_files.check_epoch(
                self.session_id, self.path, self.epoch, self.link, data
            )
            if (checked.next_seq, checked.next_prev) != (self._next_seq, self._next_prev):
                raise LogCorrupt(
                    f"{self.log_path}: holds {checked.next_seq} lines ending elsewhere than the "
                    f"{self._next_seq} acknowledged ones"
                )
        except (OSError, LogCorrupt, NotARegularFile) as e:
            os.close(fd)
            self._close_for_good(f"{where}: {errno_name(e) if isinstance(e, OSError) else e}")
            raise SessionError(f"{self.log_path}: the log is closed: {self._shut}") from e
        old, self._fd = self._fd, fd
        if self._lock_fd < 0:
            self._lock_fd = old  # its open file description holds the flock
        else:
            os.close(old)
        self._size = len(data)
        self._stale = False

    def _close_for_good(self, why: str) -> None:
        self._shut = why
        self.close()

    def close(self) -> None:
        """Closes the log and releases its lock. Closing twice is harmless."""
        for name in ("_fd", "_lock_fd"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # A log dropped without close() still releases its lock (and its fd) when collected.
        self.close()


def _undo_create(fd: int, tmp: Path) -> None:
    """Removes what a failed create made under its hidden name, so nothing is left behind."""
    for name in (LOG_NAME, BASELINE_NAME):
        with contextlib.suppress(OSError):
            os.unlink(tmp / name)
    with contextlib.suppress(OSError):
        os.rmdir(tmp)
    if fd >= 0:
        os.close(fd)
