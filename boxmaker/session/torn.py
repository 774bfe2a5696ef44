"""A torn last line: what `bxctl repair` may cut and `bxctl verify` suggests cutting. [core]

A line is written with one `write` and acknowledged only after its fsync, so a final line without
its newline is a record nobody was told about: cutting it loses nothing that was promised. Any
other fault (a bad complete line, a broken chain, a baseline mismatch) is never cut.
"""

from __future__ import annotations

from .check import check_session
from .errors import LogCorrupt


def torn_tail(data: bytes) -> int | None:
    """Where a torn last line starts (the bytes to keep), or None when the log ends in a newline."""
    if not data or data.endswith(b"\n"):
        return None
    return data.rfind(b"\n") + 1


def repairable_cut(
    session_id: str,
    log_name: str,
    data: bytes,
    baseline_name: str,
    baseline_data: bytes | None,
) -> int | None:
    """The cut that leaves a log that passes every check, when a torn last line is its only fault.

    None when the log ends in a newline, or still fails once its torn last line is gone.
    """
    cut = torn_tail(data)
    if cut is None:
        return None
    try:
        check_session(session_id, log_name, data[:cut], baseline_name, baseline_data)
    except LogCorrupt:
        return None
    return cut
