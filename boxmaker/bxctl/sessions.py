"""`bxctl sessions [--home <path>] [--json]`: every session under the home, newest first.

Each session is checked as `bxctl verify` checks one (`session.store.verify_session`):
read-only, no lock taken, nothing written, so it runs beside a running loopd. A line gives the id,
the record count (over every epoch), the epochs (issue 21: 1 until the first compaction), the last
activity (the last record's time) and whether the log verifies. For a
log that does not verify, the count is of its complete lines and the last activity is the last
line's `time` when it has one, else the log file's modification time; the error follows.

The home is `--home`, else $BOXMAKER_HOME, else make run's (run.env), else /var/lib/boxmaker.
Folders whose names are not session ids (a create in progress is `.<id>...new`) are skipped.
Exit 0 when every session verifies (or there are none), 1 when one does not.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from boxmaker._cli import Environment, ExitStatus
from boxmaker.proto import is_session_id
from boxmaker.proto.rfc3339 import format_time, is_time
from boxmaker.session.errors import SessionError
from boxmaker.session.files import errno_name, read_regular
from boxmaker.session.paths import LOG_MAX_BYTES, LOG_NAME, SESSIONS_DIR
from boxmaker.session.verify import verify_session

from .stack import add_home_argument, home_for

HELP = "list the sessions on disk: records, last activity, and whether each log verifies"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_home_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON line per session")


@dataclass(frozen=True, slots=True)
class Listed:
    session: str
    log: str
    records: int
    last_activity: str | None
    error: str | None
    epochs: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, object]:
        return {
            "session": self.session,
            "ok": self.ok,
            "records": self.records,
            "epochs": self.epochs,
            "last_activity": self.last_activity,
            "log": self.log,
            "error": self.error,
        }


def _salvage(log: Path) -> tuple[int, str | None]:
    """For a log that does not verify: its complete lines, and the last activity as well as it
    can be told (the last complete line's time, else the file's modification time)."""
    try:
        data = read_regular(log, LOG_MAX_BYTES)  # never a FIFO's hang or /dev/zero's flood
        mtime = os.stat(log, follow_symlinks=False).st_mtime
    except (OSError, SessionError):
        return 0, None
    if data is None:
        return 0, None
    lines = data.split(b"\n")[:-1]  # what follows the last newline is not a complete line
    for line in reversed(lines):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        t = obj.get("time") if isinstance(obj, dict) else None
        if isinstance(t, str) and is_time(t):
            return len(lines), t
        break
    return len(lines), format_time(datetime.fromtimestamp(mtime, UTC))


class Unreadable(Exception):
    """The sessions folder cannot be listed; str() is one line for a person."""


def list_sessions(home: Path) -> list[Listed] | None:
    """The sessions under `home`, newest first; None when `<home>/sessions` does not exist.

    Raises:
        Unreadable: the folder is there but cannot be listed (another user's home, not a folder).
    """
    root = home / SESSIONS_DIR
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return None
    except OSError as e:
        hint = " (run bxctl as the user loopd runs as)" if isinstance(e, PermissionError) else ""
        raise Unreadable(f"{root}: cannot list it: {errno_name(e)}{hint}") from e
    found: list[Listed] = []
    for name in names:
        if not is_session_id(name):
            continue
        try:
            is_dir = (root / name).is_dir()
        except OSError:
            is_dir = True  # let verify say what is wrong with it
        if not is_dir:
            continue
        f = verify_session(home, name)
        if f.ok:
            found.append(Listed(name, f.log, f.records, f.last_activity, None, f.epochs))
        else:
            records, last = _salvage(root / name / LOG_NAME)
            found.append(Listed(name, f.log, records, last, f.error))
    # RFC 3339 UTC times with the same fraction width sort as strings; the unknown ones go last.
    found.sort(key=lambda s: (s.last_activity is not None, s.last_activity or "", s.session))
    found.reverse()
    return found


def _table(listed: list[Listed]) -> str:
    head = ("SESSION", "RECORDS", "EPOCHS", "LAST ACTIVITY", "LOG")
    rows = [
        (
            s.session,
            str(s.records),
            str(s.epochs),
            s.last_activity or "-",
            "ok" if s.error is None else f"FAILED: {s.error}",
        )
        for s in listed
    ]
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    return "".join(
        f"{a:<{w[0]}}  {b:>{w[1]}}  {c:>{w[2]}}  {d:<{w[3]}}  {e}\n"
        for a, b, c, d, e in [head, *rows]
    )


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    home = home_for(args.home, env.environ)
    try:
        listed = list_sessions(home)
    except Unreadable as e:
        env.stderr.write(f"bxctl sessions: {e}\n")
        return ExitStatus.ERROR
    if not listed:
        if not args.json:
            where = home / SESSIONS_DIR
            why = "" if listed is not None else f" ({where} does not exist)"
            env.stdout.write(f"no sessions under {home}{why}\n")
        return ExitStatus.OK
    if args.json:
        env.stdout.write("".join(orjson.dumps(s.to_json()).decode() + "\n" for s in listed))
    else:
        env.stdout.write(_table(listed))
    return ExitStatus.OK if all(s.ok for s in listed) else ExitStatus.ERROR
