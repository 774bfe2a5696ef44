"""What every program's `main(argv=None, env=None)` shares (httpie's shape): the injected
`Environment` and the `ExitStatus` codes. Tests call `main` in-process with an Environment of
their own streams (tests/support/cli.py), so a CLI test needs no subprocess.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field
from typing import TextIO


class ExitStatus(enum.IntEnum):
    """Exit codes of loopd, inferproxy and bxctl."""

    OK = 0
    ERROR = 1  # the command ran and failed; stderr (or the JSON line) says why
    USAGE = 2  # bad arguments or config: nothing was attempted
    INTERRUPTED = 130  # SIGINT, the shell's code for it


@dataclass
class Environment:
    """The streams a program reads and writes; the real ones unless a test injects its own."""

    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    @property
    def stdin_isatty(self) -> bool:
        return isatty(self.stdin)


def isatty(stream: TextIO) -> bool:
    """Whether `stream` is a terminal; a closed or fake stream is not."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream is not a terminal
        return False
