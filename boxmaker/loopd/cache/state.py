"""slot-cache.json: the keeper's state kept across loopd restarts, read and written with care.

It is read without following a link and with a size bound (`STATE_LIMIT`; a link, a FIFO or a
bigger file is refused with a warning, and loopd starts with no saves), checked whole by
`Policy.from_json` (session ids, bounded numbers), and trimmed of the sessions whose save file is
gone. It is written only when it changed, through a fresh `.tmp` (a link planted there is
removed, never followed), fsync'd, renamed over the file, and the folder fsync'd.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from boxmaker.session.errors import SessionError
from boxmaker.session.files import FILE_MODE, fsync_dir, read_regular, write_all

from .policy import Policy

STATE_FILE = "slot-cache.json"
# MAX_NOTES notes and a few hundred bytes a session, for every session saved within max_age_s;
# a file past it is refused like a damaged one.
STATE_LIMIT = 8 << 20


class StateFile:
    def __init__(self, path: Path, warn: Callable[[str], None]) -> None:
        self.path = path
        self.warn = warn
        self._written = b""  # the file's bytes as last read or written

    def load(self, ident: str, min_tokens: int, folder: Path | None) -> Policy:
        """The kept state, less the sessions whose save files are gone from `folder` (when
        set); a new one when it is missing or unreadable."""
        try:
            data = read_regular(self.path, STATE_LIMIT)
        except (OSError, SessionError) as exc:
            self.warn(f"cache: cannot read {self.path} ({exc}); starting with no saves")
            return Policy(ident, min_tokens)
        if data is None:
            return Policy(ident, min_tokens)
        try:
            policy = Policy.from_json(data, ident, min_tokens)
        except ValueError as exc:
            self.warn(f"cache: {self.path} is unreadable ({exc}); starting with no saves")
            return Policy(ident, min_tokens)
        self._written = data
        if folder is not None:
            for session in list(policy.saves):
                if not os.path.lexists(folder / policy.name(session)):
                    policy.forget(session)
        return policy

    def persist(self, policy: Policy) -> None:
        """Writes the state when it changed. A failure is a warning, never an exception: this
        runs on a gate's thread, and the turn must get its answer."""
        try:
            data = policy.to_json()
            if data == self._written:
                return
            folder = self.path.parent
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / (self.path.name + ".tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a link planted there goes, and its target is never opened
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, FILE_MODE)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_dir(folder)
            self._written = data
        except Exception as exc:
            self.warn(f"cache: cannot write {self.path} ({exc!r})")
