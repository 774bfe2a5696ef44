"""A daemon's lines: `<prog>: <line>`, one write each, safe from any thread.

stdout carries the start banner and one line per refused or closed connection; stderr carries
what went wrong. A closed stream must not take the daemon down: the line is lost, nothing else.
"""

import contextlib
import threading
from typing import TextIO


class DaemonLog:
    def __init__(self, prog: str, out: TextIO, err: TextIO) -> None:
        self.prog = prog
        self.out = out
        self.err = err
        self._lock = threading.Lock()  # lines from copy threads never interleave

    def _write(self, stream: TextIO, line: str) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            stream.write(f"{self.prog}: {line}\n")
            stream.flush()

    def say(self, line: str) -> None:
        """One line on stdout."""
        self._write(self.out, line)

    def warn(self, line: str) -> None:
        """One line on stderr."""
        self._write(self.err, line)

    def listening(self, path: str, *details: str) -> None:
        """The start banner: `<prog>: listening on <path>, <detail>, <detail>`."""
        self.say(", ".join([f"listening on {path}", *details]))
