"""What every program's `main(argv=None, env=None)` shares (httpie's shape): the injected
`Environment` (streams and environment variables), the `ExitStatus` codes, an argparse `Parser`
that writes to the Environment and returns instead of exiting, `guarded` for the ways out every
command shares (Ctrl-C, a reader that went away), and `print_json_line`. Tests call `main`
in-process with an Environment of their own (tests/support/cli.py), so a CLI test needs no
subprocess.
"""

from __future__ import annotations

import argparse
import enum
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, NoReturn, TextIO

import orjson

if TYPE_CHECKING:
    from _typeshed import SupportsWrite


class ExitStatus(enum.IntEnum):
    """Exit codes of loopd, inferproxy and bxctl."""

    OK = 0
    ERROR = 1  # the command ran and failed; stderr (or the JSON line) says why
    USAGE = 2  # bad arguments or config: nothing was attempted
    INTERRUPTED = 130  # SIGINT, the shell's code for it


@dataclass
class Environment:
    """The streams and environment variables a program uses; the process's own unless a test
    injects its own."""

    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @property
    def stdin_isatty(self) -> bool:
        return isatty(self.stdin)


def isatty(stream: TextIO) -> bool:
    """Whether `stream` is a terminal; a closed or fake stream is not."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream is not a terminal
        return False


class ParserExit(Exception):
    """argparse finished (help shown, or a usage error written): main returns `status`."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that writes to the Environment's streams and raises ParserExit instead
    of exiting (httpie's parser does the same). Subparsers are made of the same class, so
    `add_parser(name, env=env, ...)` passes the Environment on."""

    def __init__(self, *args: Any, env: Environment, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env = env

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            # argparse passes sys.stdout for --help and sys.stderr (or None) for errors.
            stream = self.env.stdout if file is sys.stdout else self.env.stderr
            stream.write(message)
            stream.flush()

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise ParserExit(status)


def print_json_line(out: IO[str], obj: Mapping[str, Any]) -> None:
    """One JSON object per line, flushed, so a watcher sees each as it happens."""
    out.write(orjson.dumps(obj).decode() + "\n")
    out.flush()


def interruptible() -> None:
    """SIGINT is KeyboardInterrupt (so `guarded`'s INTERRUPTED), whatever the process inherited.

    A shell without job control starts `cmd &` with SIGINT ignored, and Python then leaves it
    ignored: a SIGINT sent to stop the command is dropped by the kernel, and a `loopd complete`
    waiting before a retry waits on to its next attempt (issue 38.6; a test run from such a
    shell's background job lost its SIGINT this way). Called by a program's own `main` (never
    when a test runs it in-process), from the main thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def guarded(env: Environment, run: Callable[[], ExitStatus], on_interrupt: str = "") -> ExitStatus:
    """Runs a command with the ways out every CLI shares: Ctrl-C is INTERRUPTED (after
    `on_interrupt`, if given, on stderr); a reader that went away (`... | head -1`) is ERROR, with
    stdout pointed at /dev/null so the interpreter's flush at exit cannot fail again."""
    try:
        return run()
    except KeyboardInterrupt:
        if on_interrupt:
            env.stderr.write(on_interrupt + "\n")
            env.stderr.flush()
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:
        silence(env.stdout)
        return ExitStatus.ERROR


def silence(stream: IO[str]) -> None:
    """Points a stream whose reader left at /dev/null (the recipe in the `signal` module's
    documentation); a stream without a descriptor (a test's) has nothing to flush at exit."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
