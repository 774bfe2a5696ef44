"""`bxctl repair <session> [--home <path>] [--wait [SECONDS]] [--unanswered]`: cuts a faulty last
line off a session's log, rolls back a switch that cannot complete, rebuilds an empty or torn
epoch n > 0 from the one before (`session.repair`); with `--unanswered`, takes the owner's
messages that no answer followed off the end (one too long for the model's context made every
later turn fail, issue 29.3).

The operator's explicit way out of a power cut's shapes: the last line torn, damaged or
duplicated is cut when every line before it verifies, the original kept as
`0.jsonl.<kind>-<UTC time>` beside it; a log with no whole line is set aside. Any other fault is
refused and left as it is.

A session open in loopd or a worker is busy, and repair says who holds it: loopd's worker keeps
its session's log for `[channel] worker_idle_ms` after the last turn (5 minutes by default).
`--wait` waits for it to let go (330 s, or SECONDS), trying again every 0.2 s. A held session
that verifies (read-only, `session.verify`) has nothing to repair, and says so at once (issue
39 item 7: a healthy session was "busy" for those 5 minutes).

Exit 0 when the log was repaired or had nothing to repair; 1 when refused, busy or missing; 2 for
a bad session id.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from boxmaker._cli import Environment, ExitStatus
from boxmaker.proto import SessionIdError
from boxmaker.session.errors import RepairRefused, SessionBusy, SessionError
from boxmaker.session.paths import LOG_NAME, session_dir
from boxmaker.session.repair import (
    REBUILT,
    UNANSWERED,
    UNFINISHED,
    Repaired,
    repair_session,
    take_unanswered,
)
from boxmaker.session.verify import verify_session

from .stack import add_home_argument, home_for

HELP = "cut a faulty last line (never acknowledged) off a session's log, keeping a copy"
WAIT_S = 330.0  # [channel] worker_idle_ms's default (300 s), and some slack
RETRY_S = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session id")
    add_home_argument(parser)
    parser.add_argument(
        "--wait",
        type=float,
        nargs="?",
        const=WAIT_S,
        metavar="SECONDS",
        help="when the session is busy, wait for its holder to let go (default "
        f"{WAIT_S:g} s: loopd's idle worker keeps the log for [channel] worker_idle_ms)",
    )
    parser.add_argument(
        "--unanswered",
        action="store_true",
        help="take the owner's messages that no answer followed off the end of the log "
        "(the original kept beside it)",
    )


def holder(log: Path) -> str:
    """Who holds the log's flock, from /proc/locks: `pid N (what it runs)`, or a vaguer phrase."""
    try:
        st = os.stat(log)
        with open("/proc/locks") as f:
            rows = f.read().splitlines()
    except OSError:
        return "loopd, a worker or another process"
    for row in rows:
        parts = row.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[-3].count(":") != 2:
            continue
        if parts[-3].rsplit(":", 1)[1] != str(st.st_ino):
            continue
        pid = parts[4]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        if "boxmaker.loopd.workers.worker" in cmd:
            return f"pid {pid}, loopd's worker for this session"
        return f"pid {pid}" + (f" ({cmd[:80]})" if cmd else "")
    return "loopd, a worker or another process"


def busy_message(session: str, who: str) -> str:
    return (
        f"session {session} is busy: its log is held by {who}. loopd's worker keeps its "
        "session's log for [channel] worker_idle_ms after the last turn (300000 ms, 5 minutes, "
        f"by default), then lets go: run `bxctl repair {session} --wait` to wait for it, or stop "
        "loopd"
    )


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    home = home_for(args.home, env.environ)
    session = args.session
    deadline = None if args.wait is None else time.monotonic() + args.wait
    said = False
    while True:
        try:
            if args.unanswered:
                repaired: Repaired | None = take_unanswered(home, session)
            else:
                repaired = repair_session(home, session)
            break
        except SessionIdError as e:
            env.stderr.write(f"bxctl repair: {e}\n")
            return ExitStatus.USAGE
        except SessionBusy:
            who = holder(session_dir(home, session) / LOG_NAME)
            # A healthy session held by loopd's worker (it keeps the log for worker_idle_ms
            # after a turn) has nothing to repair: said at once, read without its lock.
            if not args.unanswered and verify_session(home, session).ok:
                env.stdout.write(
                    f"nothing to repair: session {session} verifies (read without its lock: "
                    f"{who} has it open)\n"
                )
                return ExitStatus.OK
            if deadline is None or time.monotonic() >= deadline:
                env.stderr.write(f"bxctl repair: {busy_message(session, who)}\n")
                return ExitStatus.ERROR
            if not said:
                env.stderr.write(
                    f"bxctl repair: waiting up to {args.wait:g} s for {who} to let go of "
                    f"session {session}'s log\n"
                )
                env.stderr.flush()
                said = True
            time.sleep(RETRY_S)
        except RepairRefused as e:
            env.stderr.write(f"bxctl repair: refused: {e}\n")
            return ExitStatus.ERROR
        except SessionError as e:
            env.stderr.write(f"bxctl repair: {e}\n")
            return ExitStatus.ERROR
    if repaired is None:
        env.stdout.write(f"nothing to repair: session {session} verifies\n")
    else:
        env.stdout.write(done_line(session, repaired))
    return ExitStatus.OK


def done_line(session: str, r: Repaired) -> str:
    if r.kind == UNANSWERED:
        return (
            f"repaired: session {session}: took {r.removed} bytes of unanswered messages (from "
            f"line {r.line}) off {r.log}; {r.records} records remain and verify; the original "
            f"is kept as {r.kept}\n"
        )
    if r.kind == UNFINISHED:
        return (
            f"repaired: session {session}: {r.why}; line {r.line} of {r.log} taken out, "
            f"{r.records} records remain and verify; the original is kept as {r.kept}\n"
        )
    if r.kind == REBUILT:
        return (
            f"repaired: session {session}: {r.why}; {r.records} records; the original is kept "
            f"as {r.kept}\n"
        )
    if r.set_aside:
        what = f"its only line, {r.why}" if r.kind else "the log is empty"
        return (
            f"set aside: session {session}: {r.log} holds no whole line ({what}; {r.removed} "
            f"bytes), so nothing in it was ever acknowledged; the session's folder is now "
            f"{r.kept}, and the next turn with this id starts it anew\n"
        )
    return (
        f"repaired: session {session}: removed line {r.line} ({r.removed} bytes, {r.why}) from "
        f"{r.log}; {r.records} records remain and verify; the original is kept as {r.kept}\n"
    )
