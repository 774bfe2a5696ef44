"""`bxctl verify <session> [--home <path>] [--json]`: checks a session's log from disk.

Read-only and lock-free (`session.store.verify_session`): it works with no daemon running
and beside a running writer. The home is `--home`, else `BOXMAKER_HOME`, else make
run's (run.env), else /var/lib/boxmaker.
"""

from __future__ import annotations

import argparse

from boxmaker._cli import Environment, ExitStatus, print_json_line
from boxmaker.proto import SessionIdError
from boxmaker.session.verify import verify_session

from .stack import add_home_argument, home_for

HELP = "check a session's log and baseline file from disk, and print what was found"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session id")
    add_home_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the finding as one JSON line")


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    home = home_for(args.home, env.environ)
    try:
        found = verify_session(home, args.session)
    except SessionIdError as e:
        env.stderr.write(f"bxctl verify: {e}\n")
        return ExitStatus.USAGE
    if args.json:
        obj = {
            "ok": found.ok,
            "session": found.session_id,
            "log": found.log,
            "records": found.records,
            "turns": found.turns,
            "started": found.started,
            "last_activity": found.last_activity,
            "error": found.error,
        }
        print_json_line(env.stdout, obj)
    else:
        env.stdout.write(found.line() + "\n")
    return ExitStatus.OK if found.ok else ExitStatus.ERROR
