"""The one cut `bxctl repair` makes, and `bxctl verify` suggests: the last line, when it is the
log's only fault. [core]

A line is written with one `write` and acknowledged only after its fsync, and the store writes
one line at a time, so only the last line can be one nobody was told about. A power cut leaves
three shapes there: a line without its newline (torn), a complete line that is not JSON
(damaged: zeros or garbage where the bytes never reached the disk), and the same line twice (a
write the disk did twice). Each is cut when every line before it verifies. Any other fault (a bad
line further up, a broken chain, a whole JSON line that is wrong, a baseline mismatch) is never
cut: that is damage or tampering, and cutting would hide it.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from boxmaker.proto import GENESIS_PREV

from .check import check_session
from .errors import LogCorrupt

TORN = "torn"
DAMAGED = "damaged"
DUPLICATED = "duplicated"

WHY = {
    TORN: "torn and never acknowledged",
    DAMAGED: "damaged: a line is acknowledged after its fsync, so a damaged last line is a write "
    "a power cut interrupted, never acknowledged",
    DUPLICATED: "a copy of the line before it: nothing is lost",
}


@dataclass(frozen=True, slots=True)
class Cut:
    """Keep `data[:keep]`; the cut line is line `line` (from 1), of this `kind`."""

    keep: int
    line: int
    kind: str

    @property
    def why(self) -> str:
        return WHY[self.kind]


def torn_tail(data: bytes) -> int | None:
    """Where a torn last line starts (the bytes to keep), or None when the log ends in a newline."""
    if not data or data.endswith(b"\n"):
        return None
    return data.rfind(b"\n") + 1


def last_line(data: bytes) -> Cut | None:
    """The last line as a cut when it has a power cut's shape; None for an empty log or a last
    line that is whole JSON (written so on purpose: that is never cut)."""
    if not data:
        return None
    torn = torn_tail(data)
    if torn is not None:
        return Cut(torn, data.count(b"\n") + 1, TORN)
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    before = data.rfind(b"\n", 0, start - 1) + 1 if start else -1
    if start and data[before:start] == data[start:]:
        kind = DUPLICATED
    elif _decodes(data[start:]):
        return None  # a whole JSON line that is wrong was written so: tampering, not a power cut
    else:
        kind = DAMAGED
    return Cut(start, data.count(b"\n", 0, start) + 1, kind)


def _decodes(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def repairable_cut(
    session_id: str,
    log_name: str,
    data: bytes,
    baseline_name: str,
    baseline_data: bytes | None,
    *,
    epoch: int = 0,
    first_prev: str = GENESIS_PREV,
) -> Cut | None:
    """The cut that leaves a log that passes every check, when its last line is its only fault.

    Call it on a log that failed the check. None when the log is empty or still fails once its
    last line is gone. A cut that keeps nothing (a first line torn or damaged) is returned: the
    caller sets such a session aside rather than leave an empty log.
    """
    cut = last_line(data)
    if cut is None:
        return None
    if cut.keep:
        try:
            check_session(
                session_id,
                log_name,
                data[: cut.keep],
                baseline_name,
                baseline_data,
                epoch=epoch,
                first_prev=first_prev,
            )
        except LogCorrupt:
            return None
    return cut
