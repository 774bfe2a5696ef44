"""Where a session's files are, and opening its log with its lock: shared by store and repair."""

from __future__ import annotations

import os
from pathlib import Path

from boxmaker.proto import validate_session_id

from .errors import LogCorrupt, SessionBusy, SessionError
from .files import try_lock

SESSIONS_DIR = "sessions"
LOG_NAME = "0.jsonl"
BASELINE_NAME = "0.baseline.json"


def session_dir(home: Path, session_id: str) -> Path:
    """`<home>/sessions/<id>`, after checking the id.

    Raises:
        SessionIdError: the id breaks DECISIONS.md's rule; nothing was touched.
    """
    return home / SESSIONS_DIR / validate_session_id(session_id)


def busy(session_id: str, path: Path) -> SessionBusy:
    return SessionBusy(
        f"session {session_id} is open elsewhere ({path / LOG_NAME} is locked by another open "
        "log, in this process or another): one writer at a time"
    )


def open_locked(session_id: str, path: Path) -> int:
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
        raise busy(session_id, path)
    try:
        replaced = os.stat(log_path).st_ino != os.fstat(fd).st_ino
    except OSError:
        replaced = True
    if replaced:  # `bxctl repair` swapped the file in while this opened the old one
        os.close(fd)
        raise busy(session_id, path)
    return fd
