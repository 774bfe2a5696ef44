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
  before the event that reports it goes out). A write that fails half-way is cut back to the
  last whole line and the log is closed: nothing is left half-written.
- `open` reads and checks everything (`check.check_session`): a log that fails is refused with
  the file, the line and the fault, and nothing is repaired.

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

from boxmaker.proto import (
    GENESIS_PREV,
    SessionStart,
    encode_line,
    next_prev,
    validate_session_id,
)
from boxmaker.proto.log import LogRecord

from .baseline import Baseline
from .check import CheckedLog, Finding, check_session, finding
from .errors import (
    LogCorrupt,
    NoSuchSession,
    SessionBusy,
    SessionError,
    SessionExists,
)
from .files import (
    DIR_MODE,
    create_file,
    ensure_dir,
    fsync_dir,
    read_fd,
    read_maybe,
    try_lock,
    write_all,
)

__all__ = [
    "LogCorrupt",
    "NoSuchSession",
    "SessionBusy",
    "SessionError",
    "SessionExists",
    "SessionLog",
    "SessionStore",
    "verify_session",
]

SESSIONS_DIR = "sessions"
LOG_NAME = "0.jsonl"
BASELINE_NAME = "0.baseline.json"


def session_dir(home: Path, session_id: str) -> Path:
    """`<home>/sessions/<id>`, after checking the id.

    Raises:
        SessionIdError: the id breaks DECISIONS.md's rule; nothing was touched.
    """
    return home / SESSIONS_DIR / validate_session_id(session_id)


class SessionStore:
    """The sessions under one home."""

    def __init__(self, home: Path) -> None:
        self.home = home

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
        return SessionLog(fd, session_id, path, checked, len(line))

    def open(self, session_id: str) -> SessionLog:
        """Opens an existing session to append to it, after checking all of it.

        Raises:
            SessionIdError: a bad id, before anything is touched.
            NoSuchSession: the session's folder does not exist.
            SessionBusy: the log is open elsewhere (this process or another).
            LogCorrupt: the log or its baseline file is refused; the message names file and line.
        """
        path = session_dir(self.home, session_id)
        if not path.is_dir():
            raise NoSuchSession(f"no session {session_id} ({path} does not exist)")
        fd = _open_locked(session_id, path)
        try:
            log_path = path / LOG_NAME
            data = read_fd(fd)
            base_path = path / BASELINE_NAME
            checked = check_session(
                session_id, str(log_path), data, str(base_path), read_maybe(base_path)
            )
        except BaseException:
            os.close(fd)
            raise
        return SessionLog(fd, session_id, path, checked, len(data))


class SessionLog:
    """An open, locked session log. `close()` (or leaving a `with` block) releases the lock."""

    def __init__(
        self, fd: int, session_id: str, path: Path, checked: CheckedLog, size: int
    ) -> None:
        self._fd = fd
        self.session_id = session_id
        self.path = path  # the session's folder
        self.baseline = checked.baseline
        self._records = list(checked.records)
        self._view: tuple[LogRecord, ...] | None = checked.records
        self._next_seq = checked.next_seq
        self._next_prev = checked.next_prev
        self._size = size

    @property
    def log_path(self) -> Path:
        return self.path / LOG_NAME

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
            SessionError: the log is closed, the record is a session_start, or the write or
                fsync failed. In the last case the file is cut back to its last whole line if
                possible, and the log is closed: open it again to go on.
        """
        if self._fd < 0:
            raise SessionError(f"{self.log_path}: the log is closed")
        if type(record) is SessionStart:
            raise SessionError(f"{self.log_path}: only create writes a session_start")
        line = encode_line(record, self._next_seq, self._next_prev)
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
            os.fsync(self._fd)
        except OSError as e:
            self._abandon()
            raise SessionError(
                f"{self.log_path}: append of line {self._next_seq + 1} failed ({e.strerror or e}); "
                "the log was cut back to its last whole line and closed"
            ) from e
        self._records.append(record)
        self._view = None
        self._next_seq += 1
        self._next_prev = next_prev(line)
        self._size += len(line)

    def _abandon(self) -> None:
        # Best effort: whatever part of the line reached the file goes, so the next open sees
        # the log as it was before this append. If even that fails, open refuses the torn line.
        try:
            os.ftruncate(self._fd, self._size)
            os.fsync(self._fd)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        """Closes the log and releases its lock. Closing twice is harmless."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
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
        if getattr(self, "_fd", -1) >= 0:
            self.close()


def verify_session(home: Path, session_id: str) -> Finding:
    """Checks a session from disk, read-only and without its lock (a running writer is fine).

    Raises:
        SessionIdError: a bad id, before anything is touched.
    """
    path = session_dir(home, session_id)
    log_path = path / LOG_NAME
    if not path.is_dir():
        return Finding(session_id, str(log_path), error=f"no such session ({path} does not exist)")
    try:
        fd = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Finding(session_id, str(log_path), error=f"{log_path}: missing; no log")
    except OSError as e:
        return Finding(session_id, str(log_path), error=f"{log_path}: cannot read: {e.strerror}")
    try:
        data = read_fd(fd)
    finally:
        os.close(fd)
    base_path = path / BASELINE_NAME
    try:
        checked = check_session(
            session_id, str(log_path), data, str(base_path), read_maybe(base_path)
        )
    except LogCorrupt as e:
        return Finding(session_id, str(log_path), error=str(e))
    return finding(session_id, str(log_path), checked)


def _busy(session_id: str, path: Path) -> SessionBusy:
    return SessionBusy(
        f"session {session_id} is open elsewhere ({path / LOG_NAME} is locked by another open "
        "log, in this process or another): one writer at a time"
    )


def _open_locked(session_id: str, path: Path) -> int:
    """Opens `0.jsonl` for appending and takes its lock, or explains why not."""
    log_path = path / LOG_NAME
    try:
        fd = os.open(log_path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
    except FileNotFoundError:
        raise LogCorrupt(f"{log_path}: missing; the session's folder holds no log") from None
    except OSError as e:
        raise SessionError(f"{log_path}: cannot open it to append: {e.strerror}") from e
    if not try_lock(fd):
        os.close(fd)
        raise _busy(session_id, path)
    return fd


def _undo_create(fd: int, tmp: Path) -> None:
    """Removes what a failed create made under its hidden name, so nothing is left behind."""
    for name in (LOG_NAME, BASELINE_NAME):
        with contextlib.suppress(OSError):
            os.unlink(tmp / name)
    with contextlib.suppress(OSError):
        os.rmdir(tmp)
    if fd >= 0:
        os.close(fd)
