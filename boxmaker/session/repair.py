"""`bxctl repair`'s work: cut the last line off a session's log when it is the only fault,
keeping the original.

Only the last line is ever cut, and only when every line before it verifies: torn (no newline),
damaged (a complete line that does not decode or chain) or duplicated (the line before, twice).
Such a line was never acknowledged (torn.py says why). A log with no whole line at all (empty, or
its first line torn or damaged) held nothing ever acknowledged: its folder is set aside as
`sessions/.<id>.set-aside-<UTC time>`, so the id starts anew. Every other fault (a bad line
further up, a broken chain, a baseline that does not match) is refused: damage or tampering.

The session's flock is taken first, so a log open in loopd or a worker is never touched. In a
compacted session only the current epoch's log is repaired (the others end with their
`epoch_end` and are checked first). The original stays as `<epoch>.jsonl.<kind>-<UTC time>` (a
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
from .baseline import BASELINE_MAX_BYTES
from .check import check_session
from .epochs import baseline_name
from .errors import LogCorrupt, NoSuchSession, RepairRefused, SessionError
from .files import (
    FILE_MODE,
    create_file,
    fsync_dir,
    open_regular,
    read_bounded,
    read_regular,
    write_all,
)
from .paths import LOG_MAX_BYTES, cannot_reach, open_locked, session_dir
from .torn import WHY, last_line, repairable_cut

ONLY_LAST = (
    "repair only cuts the last line, when the lines before it verify (torn, damaged or "
    "duplicated: a power cut's shapes)"
)


@dataclass(frozen=True, slots=True)
class Repaired:
    """What a repair did: the line it cut, its size, where the original is, what is left."""

    log: Path
    kept: Path  # the original, byte for byte
    line: int  # the cut line's number, from 1
    removed: int  # bytes cut
    records: int  # records left, all verified
    kind: str  # torn.TORN, DAMAGED or DUPLICATED; "" for an empty log
    set_aside: bool = False  # the whole folder was moved to `kept`: no whole line was left

    @property
    def why(self) -> str:
        return WHY.get(self.kind, "empty")


def repair_session(home: Path, session_id: str, now: datetime | None = None) -> Repaired | None:
    """Cuts the log's faulty last line, or sets an empty session aside; None when the log
    verifies (nothing to repair).

    Raises:
        SessionIdError: a bad id, before anything is touched.
        NoSuchSession: the session's folder does not exist.
        SessionBusy: the log is open in loopd, a worker or another process.
        RepairRefused: the log has a fault other than its last line; nothing was changed.
        LogCorrupt, SessionError: the log is missing or the files cannot be read or written.
    """
    path = session_dir(home, session_id)
    try:
        if not path.is_dir():
            raise NoSuchSession(f"no session {session_id} ({path} does not exist)")
    except OSError as e:
        raise SessionError(cannot_reach(path, e)) from e
    lock = open_locked(session_id, path)
    fd = -1
    try:
        epoch, link = epoch_files.current_epoch(session_id, path)  # issue 21
        log_path = path / f"{epoch}.jsonl"
        base_path = str(path / baseline_name(epoch))
        fd = open_regular(log_path, os.O_RDWR) if epoch else lock
        data = read_bounded(fd, LOG_MAX_BYTES, str(log_path))
        base_data = read_regular(Path(base_path), BASELINE_MAX_BYTES)

        def check(log_data: bytes) -> int:
            args = (session_id, str(log_path), log_data, base_path, base_data)
            return len(check_session(*args, epoch=epoch, first_prev=link).records)

        try:
            check(data)
            return None
        except LogCorrupt as e:
            fault = str(e)
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        cut = repairable_cut(
            session_id, str(log_path), data, base_path, base_data, epoch=epoch, first_prev=link
        )
        if epoch == 0 and (not data or (cut is not None and not cut.keep)):
            # Not one whole line: nothing in this session was ever acknowledged.
            aside = path.parent / f".{session_id}.set-aside-{stamp}"
            _set_aside(path, aside)
            line, kind = (cut.line, cut.kind) if cut else (0, "")
            return Repaired(log_path, aside, line, len(data), 0, kind, set_aside=True)
        if cut is None or not cut.keep:
            # A later epoch's first line is its SessionStart, written whole by the switch.
            last = last_line(data)
            also = "" if last is None else "; without its last line the log still fails"
            raise RepairRefused(f"{fault}{also}; {ONLY_LAST}: nothing was changed")
        records = check(data[: cut.keep])
        kept = path / f"{log_path.name}.{cut.kind}-{stamp}"
        _replace(fd, log_path, kept, data[: cut.keep])
        return Repaired(log_path, kept, cut.line, len(data) - cut.keep, records, cut.kind)
    finally:
        if fd >= 0 and fd != lock:
            os.close(fd)
        os.close(lock)


def _set_aside(path: Path, aside: Path) -> None:
    """Moves the session's folder to a hidden name (never an id), so the id can start anew."""
    try:
        os.rename(path, aside)
        fsync_dir(path.parent)
    except OSError as e:
        raise SessionError(f"{path}: cannot set it aside as {aside}: {e.strerror}") from e


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
