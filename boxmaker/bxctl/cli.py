"""`bxctl <command> ...`: argv to a command; `main(argv=None, env=None) -> ExitStatus` (httpie's
shape). Every command writes only to the injected Environment's streams, so tests call `main`
in-process.

    bxctl chat [--socket <path>] [--session <id>] [--thinking|--no-thinking] [--say <text>] [--json]
               [--connect-timeout-ms <ms>] [--silence-ms <ms>]
        Talks to loopd over loop.sock, one connection per turn (chat.py says what each line
        means). Exit 0; 1 when loopd is not running or does not accept in time, a connection
        closes early or goes silent past the bound, a frame is malformed, or (with --say) the
        turn ends in an error; 2 for a bad session id or bound.

    bxctl sessions [--home <path>] [--json]
        Lists the sessions on disk, newest first, each checked as verify checks one. Exit 0, or
        1 when a session's log does not verify.

    bxctl verify <session> [--home <path>] [--json]
        Checks a session's log and baseline file from disk (no daemon needed) and prints the
        finding. Exit 0 when the log verifies, 1 when it is refused or missing, 2 for a bad
        session id or bad arguments. When a torn last line is the only fault, it says so and
        names `bxctl repair`.

    bxctl repair <session> [--home <path>] [--wait [SECONDS]]
        Cuts the last line off a session's log when it is the only fault (torn, damaged or
        duplicated: never acknowledged), keeping the original as 0.jsonl.<kind>-<UTC time>; sets
        aside a log with no whole line; refuses any other fault. A session open in loopd is busy:
        it names the holder, and --wait waits for it. Exit 0 when repaired or nothing to repair,
        1 when refused, busy or missing, 2 for a bad session id.

A new command is a module with `add_arguments(parser)` and `run(args, env) -> ExitStatus`,
listed in COMMANDS.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from boxmaker._cli import Environment, ExitStatus

from . import chat, repair, sessions, verify

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

PROG = "bxctl"

Run = Callable[[argparse.Namespace, Environment], ExitStatus]

# name -> (help, add_arguments, run)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Run]] = {
    "chat": (chat.HELP, chat.add_arguments, chat.run),
    "sessions": (sessions.HELP, sessions.add_arguments, sessions.run),
    "verify": (verify.HELP, verify.add_arguments, verify.run),
    "repair": (repair.HELP, repair.add_arguments, repair.run),
}


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse, writing to the Environment's streams and raising instead of exiting."""

    env: Environment  # set on the per-call subclass made by _parser_class

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse sends help to sys.stdout and usage errors to sys.stderr.
        if message:
            (self.env.stdout if file is sys.stdout else self.env.stderr).write(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self.env.stderr.write(message)
        raise _Exit(status)


def _parser_class(env: Environment) -> type[_Parser]:
    # A class per call, so the subparsers argparse makes write to the same streams.
    class EnvParser(_Parser):
        pass

    EnvParser.env = env
    return EnvParser


def build_parser(env: Environment) -> argparse.ArgumentParser:
    cls = _parser_class(env)
    parser = cls(prog=PROG, description="Boxmaker's command line.")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=cls
    )
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        add_arguments(sub)
        sub.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> ExitStatus:
    """Runs one command; returns its exit status."""
    env = env or Environment()
    try:
        args = build_parser(env).parse_args(argv)
    except _Exit as e:
        return ExitStatus.OK if e.status == 0 else ExitStatus.USAGE
    run: Run = args.run
    try:
        return run(args, env)
    except KeyboardInterrupt:
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`bxctl chat --json | head -1`): nothing more can be said to it.
        # Point stdout at /dev/null so the interpreter's own flush at exit cannot fail again.
        _silence_stdout()
        return ExitStatus.ERROR


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (a test's StringIO)
        pass
