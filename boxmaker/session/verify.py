"""`verify_session`: a session checked from disk, read-only and lock-free, for bxctl."""

from __future__ import annotations

import os
from pathlib import Path

from . import epoch_files
from .check import Finding, check_session, finding
from .errors import LogCorrupt, SessionError
from .files import read_regular
from .paths import LOG_MAX_BYTES, LOG_NAME, cannot_reach, read_baseline, session_dir
from .repair import REBUILT, plan_switch_repair
from .torn import repairable_cut


def switch_finding(session_id: str, path: Path) -> Finding | None:
    """A switch that cannot complete, or an empty or torn epoch n > 0, as a FAILED finding that
    says what `bxctl repair` does about it (issue 29.2); None when it is not the case."""
    try:
        plan = plan_switch_repair(session_id, path)
    except (SessionError, OSError):
        return None  # the chain's own check below says what is wrong
    if plan is None:
        return None
    fix = f"`bxctl repair {session_id}`"
    if plan.kind == REBUILT:
        does = f"{fix} rebuilds it from epoch {plan.epoch - 1}, which it is made from"
    else:
        does = (
            f"every turn of this session fails until {fix} rolls the switch back: the epoch_end "
            "taken out (the original kept beside it), the next baseline set aside; the session "
            "folds again at its next chance"
        )
    log = str(path / f"{plan.epoch}.jsonl")
    return Finding(session_id, log, error=f"{plan.why}; {does}")


def verify_session(home: Path, session_id: str) -> Finding:
    """Checks a session from disk, read-only and without its lock (a running writer is fine).

    Never blocks and never raises for what is on disk: a FIFO, a device, a folder, a link, a file
    over its bound or one that cannot be read is a finding that says so.

    Raises:
        SessionIdError: a bad id, before anything is touched.
    """
    path = session_dir(home, session_id)
    log_path = path / LOG_NAME
    name = str(log_path)
    try:
        os.stat(path)
        if (found := switch_finding(session_id, path)) is not None:
            return found
        if epoch_files.compacted(path):  # every epoch and the links between them (issue 21)
            return epoch_files.verify_epochs(session_id, path)
    except FileNotFoundError:
        return Finding(session_id, name, error=f"no such session ({path} does not exist)")
    except OSError as e:
        return Finding(session_id, name, error=cannot_reach(path, e))
    try:
        data = read_regular(log_path, LOG_MAX_BYTES)
        base = read_baseline(path)
    except SessionError as e:  # not a regular file, over its bound, cannot be opened
        return Finding(session_id, name, error=str(e))
    except OSError as e:
        return Finding(session_id, name, error=cannot_reach(log_path, e))
    if data is None:
        return Finding(session_id, name, error=f"{log_path}: missing; no log")
    try:
        checked = check_session(session_id, name, data, *base)
    except LogCorrupt as e:
        error = str(e)
        cut = repairable_cut(session_id, name, data, *base)
        fix = f"`bxctl repair {session_id}`"
        if not data or (cut is not None and not cut.keep):
            error += f"; nothing in it was ever acknowledged: {fix} sets the session aside"
        elif cut is not None:
            error += f"; this {cut.kind} last line is the only fault: {fix} cuts it"
        return Finding(session_id, name, error=error)
    return finding(session_id, name, checked)
