"""The line editor's history file, kept by the home-file rules (issue 38 items 2 and 3).

prompt_toolkit's FileHistory opens the file with `open()`: a FIFO in its place hung every
terminal chat before its first prompt, a link to /dev/zero would be read until memory ran out,
and a full disk under it raised inside the key handler, so every Enter printed a traceback and
"Press ENTER to continue...". Here the file is made 0600, opened with session.files'
open_regular (no symlink followed, never blocking on a FIFO, a regular file or nothing) and read
with read_bounded; a write that fails (ENOSPC, EFBIG, EIO) drops the history for the rest of the
chat, and `dropped` says why once, for the chat to print as one line. The file's format is
FileHistory's, so histories written before read the same. (lineinput.history_file makes it.)
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit.history import History

from boxmaker.session.errors import SessionError
from boxmaker.session.files import open_regular, read_bounded, write_all

MAX_BYTES = 8 << 20  # years of messages; past it the file is not read (nor written)


def parse(data: bytes) -> list[str]:
    """FileHistory's format: `+`-prefixed lines make one entry; anything else separates them.
    Newest first, as History.load_history_strings yields them."""
    strings: list[str] = []
    lines: list[str] = []
    for raw in data.decode("utf-8", "replace").splitlines(keepends=True):
        if raw.startswith("+"):
            lines.append(raw[1:])
        elif lines:
            strings.append("".join(lines)[:-1])
            lines = []
    if lines:
        strings.append("".join(lines).removesuffix("\n"))
    return strings[::-1]


def entry(string: str, now: datetime.datetime | None = None) -> bytes:
    stamp = now or datetime.datetime.now()
    body = "".join(f"+{line}\n" for line in string.split("\n"))
    return f"\n# {stamp}\n{body}".encode("utf-8", "replace")


class BoundedFileHistory(History):
    """A History in `path`, read and appended by the home-file rules; see the module."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dropped: str | None = None  # why the file is no longer written (said once)
        self._off = False
        super().__init__()

    def _drop(self, why: str) -> None:
        self._off = True
        self.dropped = f"[history: {why}; this chat's messages are kept in memory only from now on]"

    def load_history_strings(self) -> Iterable[str]:
        try:
            fd = open_regular(self.path)
        except FileNotFoundError:
            return []
        except (OSError, SessionError) as e:
            self._drop(f"cannot read {self.path}: {e}")
            return []
        try:
            return parse(read_bounded(fd, MAX_BYTES, str(self.path)))
        except (OSError, SessionError) as e:
            self._drop(f"cannot read {self.path}: {e}")
            return []
        finally:
            os.close(fd)

    def store_string(self, string: str) -> None:
        if self._off:
            return
        try:
            fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                write_all(fd, entry(string))
            finally:
                os.close(fd)
        except (OSError, SessionError) as e:
            why = os.strerror(e.errno) if isinstance(e, OSError) and e.errno else str(e)
            self._drop(f"cannot write {self.path}: {why}")
