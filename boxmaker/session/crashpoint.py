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

`BOXMAKER_CRASH_AT=<point>:<n>` makes a process SIGKILL itself the n-th time it reaches `point`;
with a path, the file holds the plan and is renamed when it fires (`boxmaker/_crashpoint.py`, the
hook gatewayd shares). Unset (the only way loopd runs outside the tests), it returns at once.
"""

from __future__ import annotations

from boxmaker._crashpoint import CrashPoints

ENV = "BOXMAKER_CRASH_AT"
POINTS = ("append_before_write", "append_after_write", "append_after_fsync")
EPOCH_POINTS = ("epoch_file_written", "epoch_file_renamed", "epoch_baseline_written")

reached = CrashPoints(ENV, POINTS + EPOCH_POINTS).reached
