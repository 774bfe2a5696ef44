"""`bxctl repair`'s work: cut a torn last line off a session's log, keeping the original.

Only a final line without its newline is cut. Such a line was never acknowledged: a line's event
goes out after its fsync, and a line whose write failed was meant to be cut back by the store
(`SessionLog.append`), which only a crash or a failing disk can have prevented. Every other fault
(a bad complete line, a broken chain, a baseline that does not match) is refused: those are
damage or tampering, and cutting would hide them.

The session's flock is taken first, so a log open in loopd or a worker is never touched. In a
compacted session only the current epoch's log is repaired (the others end with their
`epoch_end` and are checked first). The original stays as `<epoch>.jsonl.torn-<UTC time>` (a
hard link to the same bytes, 0600); the cut log is written to a temporary file, fsynced, renamed
over `<epoch>.jsonl`, and the folder fsynced.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import epoch_files
from .check import check_session
from .epochs import baseline_name
from .errors import LogCorrupt, NoSuchSession, RepairRefused, SessionError
from .files import FILE_MODE, create_file, fsync_dir, read_fd, read_maybe, write_all
from .paths import open_locked, session_dir
from .torn import torn_tail

ONLY_TORN = "repair only cuts a torn last line (a final line without its newline)"


@dataclass(frozen=True, slots=True)
class Repaired:
    """What a repair did: the line it cut, its size, where the original is, what is left."""

    log: Path
    kept: Path  # the original, byte for byte
    line: int  # the cut line's number, from 1
    removed: int  # bytes cut
    records: int  # records left, all verified


def repair_session(home: Path, session_id: str, now: datetime | None = None) -> Repaired | None:
    """Cuts the log's torn last line; None when the log verifies (nothing to repair).

    Raises:
        SessionIdError: a bad id, before anything is touched.
        NoSuchSession: the session's folder does not exist.
        SessionBusy: the log is open in loopd, a worker or another process.
        RepairRefused: the log has a fault other than a torn last line; nothing was changed.
        LogCorrupt, SessionError: the log is missing or the files cannot be read or written.
    """
    path = session_dir(home, session_id)
    if not path.is_dir():
        raise NoSuchSession(f"no session {session_id} ({path} does not exist)")
    lock = open_locked(session_id, path)
    fd = -1
    try:
        epoch, link = epoch_files.current_epoch(session_id, path)  # issue 21
        log_path = path / f"{epoch}.jsonl"
        base_path = path / baseline_name(epoch)
        fd = os.open(log_path, os.O_RDWR | os.O_CLOEXEC) if epoch else lock
        data = read_fd(fd)
        base_data = read_maybe(base_path)

        def check(log_data: bytes) -> int:
            args = (session_id, str(log_path), log_data, str(base_path), base_data)
            return len(check_session(*args, epoch=epoch, first_prev=link).records)

        try:
            check(data)
            return None
        except LogCorrupt as e:
            fault = str(e)
        cut = torn_tail(data)
        if cut is None:
            raise RepairRefused(f"{fault}; {ONLY_TORN}: nothing was changed")
        try:
            records = check(data[:cut])
        except LogCorrupt as e:
            raise RepairRefused(
                f"{e}; without its torn last line the log still fails, and {ONLY_TORN}: "
                "nothing was changed"
            ) from None
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        kept = path / f"{log_path.name}.torn-{stamp}"
        _replace(fd, log_path, kept, data[:cut])
        line = data.count(b"\n", 0, cut) + 1
        return Repaired(log_path, kept, line, len(data) - cut, records)
    finally:
        if fd >= 0 and fd != lock:
            os.close(fd)
        os.close(lock)


def _replace(fd: int, log_path: Path, kept: Path, data: bytes) -> None:
    """Keeps the original under `kept`, then puts `data` in its place atomically."""
    folder = log_path.parent
    tmp = folder / f".{log_path.name}.{os.getpid()}.{secrets.token_hex(4)}.repair"
    try:
        os.fchmod(fd, FILE_MODE)  # the original keeps the session files' mode under its new name
        os.link(log_path, kept)
    except FileExistsError:
        raise SessionError(f"{kept} already exists; run repair again in a second") from None
    except OSError as e:
        raise SessionError(f"{kept}: cannot keep the original there: {e.strerror}") from e
    try:
        tfd = create_file(tmp)
        try:
            write_all(tfd, data)
            os.fsync(tfd)
        finally:
            os.close(tfd)
        os.rename(tmp, log_path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        with contextlib.suppress(OSError):
            os.unlink(kept)  # the log was not replaced: leave the folder as it was found
        raise SessionError(f"{log_path}: cannot write the repaired log: {e.strerror}") from e
    try:
        fsync_dir(folder)
    except OSError as e:
        raise SessionError(
            f"{folder}: the log was repaired but fsync of its folder failed: {e.strerror}"
        ) from e
