"""A test-only crash hook for gatewayd's crash windows (M4 section 6): inert unless
BOXMAKER_GATEWAYD_CRASH_AT is set.

    before_turn    the post is taken, its turn not yet sent
    during_turn    the turn is sent and loopd has answered its first frame
    after_turn     turn_done is read, nothing posted
    between_parts  part 1 of several is posted, the rest not
    after_post     every part is posted, the channel's cursor not yet moved

`BOXMAKER_GATEWAYD_CRASH_AT=<point>:<n>` SIGKILLs gatewayd the n-th time it reaches the point.
With a path instead, the file holds `<point>:<n>` and is renamed to `<path>.fired` before the
kill, so a restarted gatewayd runs on (session/crashpoint.py is loopd's twin of this).
"""

from __future__ import annotations

import os
import signal

ENV = "BOXMAKER_GATEWAYD_CRASH_AT"
POINTS = ("before_turn", "during_turn", "after_turn", "between_parts", "after_post")

_SETTING = os.environ.get(ENV) or None
_counts: dict[str, int] = {}


def reached(point: str) -> None:
    if _SETTING is None:
        return
    _counts[point] = count = _counts.get(point, 0) + 1
    path = _SETTING if "/" in _SETTING else None
    text = _SETTING
    if path is not None:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            return
    name, _, n = text.partition(":")
    if name != point or not n.isdigit() or int(n) != count:
        return
    if path is not None:
        try:
            os.rename(path, path + ".fired")
        except OSError:
            return  # another process fired it
    os.kill(os.getpid(), signal.SIGKILL)
