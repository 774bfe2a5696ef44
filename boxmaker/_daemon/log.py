"""A daemon's lines: `<prog>: <line>`, one write each, safe from any thread.

stdout carries the start banner and one line per refused or closed connection; stderr carries
what went wrong. A closed stream must not take the daemon down: the line is lost, nothing else.
Under supervisord (conf/supervisord.conf sets BOXMAKER_LOG_TIMES=1) each line starts with its
UTC time, `2026-01-02T03:04:05.678Z loopd: ...`: the logs are read later, beside each other.
"""

import contextlib
import os
import threading
import time
from typing import TextIO

STAMP_ENV = "BOXMAKER_LOG_TIMES"


def stamp(now: float) -> str:
    """`now` (Unix seconds) as the UTC time a line starts with."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return f"{whole}.{int(now * 1000) % 1000:03d}Z"


class DaemonLog:
    def __init__(self, prog: str, out: TextIO, err: TextIO, *, times: bool | None = None) -> None:
        self.prog = prog
        self.out = out
        self.err = err
        self.times = os.environ.get(STAMP_ENV) == "1" if times is None else times
        self._lock = threading.Lock()  # lines from copy threads never interleave

    def _write(self, stream: TextIO, line: str) -> None:
        head = f"{stamp(time.time())} " if self.times else ""
        with self._lock, contextlib.suppress(OSError, ValueError):
            stream.write(f"{head}{self.prog}: {line}\n")
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
