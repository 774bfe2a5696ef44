"""`bxctl repair <session> [--home <path>]`: cuts a torn last line off a session's log.

The operator's explicit way out of a torn tail (`session.repair`): only a final line
without its newline is cut, the original is kept as `0.jsonl.torn-<UTC time>` beside it, and a
session open in loopd or a worker is refused. Any other fault is refused and left as it is.
Exit 0 when the log was repaired or had nothing to repair; 1 when refused, busy or missing; 2 for
a bad session id.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from boxmaker._cli import Environment, ExitStatus
from boxmaker._defaults import DEFAULT_HOME, HOME_ENV
from boxmaker.proto import SessionIdError
from boxmaker.session.errors import RepairRefused, SessionBusy, SessionError
from boxmaker.session.repair import repair_session

from .verify import home_from

HELP = "cut a torn last line (a record never acknowledged) off a session's log, keeping a copy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session id")
    parser.add_argument(
        "--home",
        type=Path,
        help=f"Boxmaker's home (default: ${HOME_ENV}, else {DEFAULT_HOME})",
    )


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    home = home_from(args.home)
    session = args.session
    try:
        repaired = repair_session(home, session)
    except SessionIdError as e:
        env.stderr.write(f"bxctl repair: {e}\n")
        return ExitStatus.USAGE
    except SessionBusy:
        env.stderr.write(
            f"bxctl repair: session {session} is busy (its log is open in loopd or a worker): "
            "stop loopd or wait until the session is idle, then run repair again\n"
        )
        return ExitStatus.ERROR
    except RepairRefused as e:
        env.stderr.write(f"bxctl repair: refused: {e}\n")
        return ExitStatus.ERROR
    except SessionError as e:
        env.stderr.write(f"bxctl repair: {e}\n")
        return ExitStatus.ERROR
    if repaired is None:
        env.stdout.write(f"nothing to repair: session {session} verifies\n")
        return ExitStatus.OK
    env.stdout.write(
        f"repaired: session {session}: removed line {repaired.line} ({repaired.removed} bytes, "
        f"torn and never acknowledged) from {repaired.log}; {repaired.records} records remain "
        f"and verify; the original is kept as {repaired.kept}\n"
    )
    return ExitStatus.OK
