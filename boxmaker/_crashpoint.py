"""The test-only crash hook loopd's session store and gatewayd share: inert unless its
environment variable is set (session/crashpoint.py and gatewayd/crashpoint.py name the points).

`<ENV>=<point>:<n>` makes a process SIGKILL itself the n-th time it reaches `point` (counted per
process, from 1). With a path instead (`<ENV>=/tmp/plan`), the file is read at every point and
holds `<point>:<n>`; the process that fires renames it to `<path>.fired` first, so one plan kills
one process once, and a test can arm a new plan without a restart. Unset (the only way the
programs run outside the tests), `reached` is one comparison and returns.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection


def read_plan(setting: str, points: Collection[str]) -> tuple[str, int, str | None] | None:
    """(point, n, the plan file or None) from the variable's value, or None when there is nothing
    to fire: no plan file, or a plan that names no point of `points` or no count."""
    path = setting if "/" in setting else None
    text = setting
    if path is not None:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            return None
    point, _, n = text.partition(":")
    if point not in points or not n.isdigit():
        return None
    return point, int(n), path


class CrashPoints:
    """One program's points and the counts it has reached them."""

    def __init__(self, env: str, points: Collection[str]) -> None:
        self.setting = os.environ.get(env) or None
        self.points = points
        self.counts: dict[str, int] = {}

    def reached(self, point: str) -> None:
        """SIGKILLs this process if the crash plan names this point and count; else returns."""
        if self.setting is None:
            return
        self.counts[point] = count = self.counts.get(point, 0) + 1
        plan = read_plan(self.setting, self.points)
        if plan is None or plan[:2] != (point, count):
            return
        if plan[2] is not None:
            try:
                os.rename(plan[2], plan[2] + ".fired")  # one process wins the plan
            except OSError:
                return
        os.kill(os.getpid(), signal.SIGKILL)
