"""A test-only crash hook for gatewayd's crash windows (M4 section 6): inert unless
BOXMAKER_GATEWAYD_CRASH_AT is set.

    before_turn    the post is taken, its turn not yet sent
    during_turn    the turn is sent and loopd has answered its first frame
    after_turn     turn_done is read, nothing posted
    between_parts  part 1 of several is posted, the rest not
    after_post     every part is posted, the channel's cursor not yet moved

`BOXMAKER_GATEWAYD_CRASH_AT=<point>:<n>` SIGKILLs gatewayd the n-th time it reaches the point.
With a path instead, the file holds `<point>:<n>` and is renamed to `<path>.fired` before the
kill, so a restarted gatewayd runs on (boxmaker/_crashpoint.py, the hook loopd's store shares).
"""

from __future__ import annotations

from boxmaker._crashpoint import CrashPoints

ENV = "BOXMAKER_GATEWAYD_CRASH_AT"
POINTS = ("before_turn", "during_turn", "after_turn", "between_parts", "after_post")

reached = CrashPoints(ENV, POINTS).reached
