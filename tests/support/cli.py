"""Runs a program's `main(argv, env)` in-process, as httpie's tests run `http()`.

    result = run_cli(loopd_main, ["selftest", "--config", path])
    assert result.status == ExitStatus.ERROR
    assert result.stderr.startswith("loopd selftest: ")

The program gets an `Environment` of in-memory streams, so a CLI test that needs no server needs
no subprocess either. Everything must go through those streams: a write to the process's own
sys.stdout or sys.stderr during the call fails the run, as does a status that is not an int.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from boxmaker._cli import Environment, ExitStatus


class Main(Protocol):
    def __call__(
        self, argv: Sequence[str] | None = None, env: Environment | None = None
    ) -> ExitStatus | int: ...


class _Stream(io.StringIO):
    """An in-memory text stream that says whether it is a terminal."""

    def __init__(self, initial: str = "", *, tty: bool = False) -> None:
        super().__init__(initial)
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@dataclass(frozen=True)
class Result:
    status: ExitStatus | int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()


def run_cli(
    main: Main, argv: Sequence[str | os.PathLike[str]], stdin: str = "", *, tty: bool = False
) -> Result:
    """Calls `main(argv, env)` with `stdin` as its input and captures what it writes.

    Args:
        main: the program's entry point, e.g. boxmaker.loopd.cli.main.
        argv: the arguments after the program name (str() is applied to each, so paths do).
        stdin: the text the program reads on stdin.
        tty: whether its stdin, stdout and stderr say they are terminals.

    Returns:
        The exit status and everything written to stdout and to stderr.

    Raises:
        AssertionError: the program wrote to the process's own stdout or stderr, or returned
            something that is not an exit status.
    """
    out, err = _Stream(tty=tty), _Stream(tty=tty)
    env = Environment(stdin=_Stream(stdin, tty=tty), stdout=out, stderr=err)
    leaked_out, leaked_err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(leaked_out), contextlib.redirect_stderr(leaked_err):
        status = main([str(arg) for arg in argv], env)
    assert isinstance(status, int), f"main returned {status!r}, not an exit status"
    leaked = leaked_out.getvalue() + leaked_err.getvalue()
    assert not leaked, f"written around the Environment: {leaked!r}"
    return Result(status, out.getvalue(), err.getvalue())
