"""`bxctl <command> ...`: argv to a command; `main(argv=None, env=None) -> ExitStatus` (httpie's
shape). Every command writes only to the injected Environment's streams, so tests call `main`
in-process.

    bxctl chat [--socket <path>] [--session <id>] [--thinking|--no-thinking] [--say <text>] [--json]
               [--connect-timeout-ms <ms>] [--silence-ms <ms>]
        Talks to loopd over loop.sock, one connection per turn (chat.py says what each line
        means). Exit 0; 1 when loopd is not running or does not accept in time, a connection
        closes early or goes silent past the bound, a frame is malformed, or (with --say) the
        turn ends in an error; 2 for a bad session id or bound.

    bxctl approve [<id>] [--owner-socket <path>] [--show | --yes | --no]
        Lists the calls brokerd holds for the owner's answer; with an id, shows that call whole
        (paged when longer than the terminal) and asks y/n/a on owner.sock (approve.py). Exit 0,
        1 when brokerd cannot be reached, refuses, or the call got no answer, 2 for bad usage.

    bxctl sessions [--home <path>] [--json]
        Lists the sessions on disk, newest first, each checked as verify checks one. Exit 0, or
        1 when a session's log does not verify.

    bxctl history <session> [--home <path>] [--broker-log <log>] [--json]
        Prints a session's conversation from its log, each call's approval from brokerd's
        decision log (history.py, decisions.py). Exit 0, 1 when it is
        missing or does not verify, 2 for a bad session id.

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

    bxctl verify-broker <log>
        Checks brokerd's decision log's hash chain (issue 22). Exit 0 when it holds, 1 when a
        line breaks it or the file cannot be read.

A new command is a module with `add_arguments(parser)` and `run(args, env) -> ExitStatus`,
listed in COMMANDS.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from boxmaker._cli import Environment, ExitStatus, Parser, ParserExit, guarded

from . import approve, chat, history, repair, sessions, verify, verify_broker

if TYPE_CHECKING:
    pass

PROG = "bxctl"

Run = Callable[[argparse.Namespace, Environment], ExitStatus]

# name -> (help, add_arguments, run)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Run]] = {
    "chat": (chat.HELP, chat.add_arguments, chat.run),
    "approve": (approve.HELP, approve.add_arguments, approve.run),
    "sessions": (sessions.HELP, sessions.add_arguments, sessions.run),
    "history": (history.HELP, history.add_arguments, history.run),
    "verify": (verify.HELP, verify.add_arguments, verify.run),
    "repair": (repair.HELP, repair.add_arguments, repair.run),
    "verify-broker": (verify_broker.HELP, verify_broker.add_arguments, verify_broker.run),
}


def build_parser(env: Environment) -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Boxmaker's command line.", env=env)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text, env=env)
        add_arguments(sub)
        sub.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> ExitStatus:
    """Runs one command; returns its exit status."""
    env = env or Environment()
    try:
        args = build_parser(env).parse_args(argv)
    except ParserExit as e:
        return ExitStatus.OK if e.status == 0 else ExitStatus.USAGE
    run: Run = args.run
    return guarded(env, lambda: run(args, env))
