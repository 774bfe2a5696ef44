"""Where a session's files are, and opening its log with its lock: shared by store and repair."""

from __future__ import annotations

import os
from pathlib import Path

from boxmaker.proto import validate_session_id

from .baseline import BASELINE_MAX_BYTES
from .errors import LogCorrupt, NoSuchSession, SessionBusy, SessionError
from .files import errno_name, open_regular, read_regular, try_lock

SESSIONS_DIR = "sessions"
LOG_NAME = "0.jsonl"
BASELINE_NAME = "0.baseline.json"
# The most a log may hold: every open reads and checks all of it, so a bound keeps a planted
# /dev/zero or a runaway file from taking the memory. 256 MiB is some 60,000 answers of the
# largest size a turn allows ([loop] max_content_bytes, 4 MiB); an append that would pass it is
# refused ("start a new session"), so the store never writes a log it would not open again.
LOG_MAX_BYTES = 256 << 20


def session_dir(home: Path, session_id: str) -> Path:
    """`<home>/sessions/<id>`, after checking the id.

    Raises:
        SessionIdError: the id breaks DECISIONS.md's rule; nothing was touched.
    """
    return home / SESSIONS_DIR / validate_session_id(session_id)


def existing_session_dir(home: Path, session_id: str) -> Path:
    """`session_dir`, which must be a folder.

    Raises:
        SessionIdError: a bad id; NoSuchSession: no such folder; SessionError: it cannot be
        looked at (the message says what to do).
    """
    path = session_dir(home, session_id)
    try:
        if not path.is_dir():
            raise NoSuchSession(f"no session {session_id} ({path} does not exist)")
    except OSError as e:
        raise SessionError(cannot_reach(path, e)) from e
    return path


def busy(session_id: str, path: Path) -> SessionBusy:
    return SessionBusy(
        f"session {session_id} is open elsewhere ({path / LOG_NAME} is locked by another open "
        "log, in this process or another): one writer at a time"
    )


def open_locked(session_id: str, path: Path) -> int:
    """Opens `0.jsonl` for appending and takes its lock, or explains why not."""
    log_path = path / LOG_NAME
    try:
        fd = open_regular(log_path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        raise LogCorrupt(f"{log_path}: missing; the session's folder holds no log") from None
    if not try_lock(fd):
        os.close(fd)
        raise busy(session_id, path)
    try:
        replaced = identity_at(log_path) != identity(fd)
    except OSError:
        replaced = True
    if replaced:  # `bxctl repair` swapped the file in while this opened the old one
        os.close(fd)
        raise busy(session_id, path)
    return fd


def identity(fd: int) -> tuple[int, int]:
    """(device, inode) of an open file."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def identity_at(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what `path` names now, a final symlink not followed; None if nothing."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def read_baseline(folder: Path) -> tuple[str, bytes | None]:
    """The session's baseline file name and bytes (None when missing), read with its bound.

    Raises:
        NotARegularFile: a link, a special file, a folder, or over BASELINE_MAX_BYTES.
        SessionError: it cannot be opened (permissions).
    """
    base_path = folder / BASELINE_NAME
    return str(base_path), read_regular(base_path, BASELINE_MAX_BYTES)


def cannot_reach(path: Path, e: OSError) -> str:
    """Why `path` cannot be looked at, with what to do when it is a permission."""
    hint = " (run bxctl as the user loopd runs as)" if isinstance(e, PermissionError) else ""
    return f"{path}: cannot look at it: {errno_name(e)}{hint}"
