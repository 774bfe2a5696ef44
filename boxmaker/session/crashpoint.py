"""A test-only crash hook: inert unless BOXMAKER_CRASH_AT names a point (docs/reliability.md).

The store calls `reached(point)` at three points of every append:

    append_before_write   the line is encoded, nothing written
    append_after_write    the whole line is written, not yet fsynced (never acknowledged)
    append_after_fsync    the line is durable, its event not yet sent

and the epoch switch (`epoch_files.switch`, issue 21) at its own steps, around the `epoch_end`
append (the commit point), which passes the three above:

    epoch_file_written    a new epoch file is written and fsynced under its hidden name
                          (1st: `<n+1>.baseline.json`, 2nd: `<n+1>.jsonl`)
    epoch_file_renamed    that file is renamed into place, the folder fsynced
    epoch_baseline_written  the baseline is in place; the epoch_end not yet appended

`BOXMAKER_CRASH_AT=<point>:<n>` makes a process SIGKILL itself the n-th time it reaches `point`
(counted per process, from 1). With a path instead (`BOXMAKER_CRASH_AT=/tmp/plan`), the file is
read at every point and holds `<point>:<n>`; the process that fires renames it to `<path>.fired`
first, so one plan kills one process once, and a test can arm a new plan without a restart.
Unset (the only way loopd runs outside the tests), `reached` is one comparison and returns.
"""

from __future__ import annotations

import os
import signal

ENV = "BOXMAKER_CRASH_AT"
POINTS = ("append_before_write", "append_after_write", "append_after_fsync")
EPOCH_POINTS = ("epoch_file_written", "epoch_file_renamed", "epoch_baseline_written")

_SETTING = os.environ.get(ENV) or None
_counts: dict[str, int] = {}


def _plan() -> tuple[str, int, str | None] | None:
    """(point, n, the plan file or None), or None when there is nothing to fire."""
    assert _SETTING is not None
    path = _SETTING if "/" in _SETTING else None
    text = _SETTING
    if path is not None:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            return None
    point, _, n = text.partition(":")
    if point not in POINTS + EPOCH_POINTS or not n.isdigit():
        return None
    return point, int(n), path


def reached(point: str) -> None:
    """SIGKILLs this process if the crash plan names this point and count; else returns."""
    if _SETTING is None:
        return
    _counts[point] = count = _counts.get(point, 0) + 1
    plan = _plan()
    if plan is None or plan[:2] != (point, count):
        return
    if plan[2] is not None:
        try:
            os.rename(plan[2], plan[2] + ".fired")  # one process wins the plan
        except OSError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
