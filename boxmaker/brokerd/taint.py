"""Taint, recomputed from brokerd's own decision records of the session. [core]

A session is tainted from the first result brokerd returned to it with `untrusted: true`, and
stays tainted in every later epoch: a compaction writes the next epoch's summary from the
tainted conversation, so the summary carries the taint. The epoch a call claims (loopd's word)
never lifts it, whether higher or lower: it only changes how the reason reads. While tainted, every
call of a tool that can write or send (its row in the table of tools says `writes`) asks the
owner, whatever its grant: a call is let through on its grant alone only if its tool only reads,
or it reaches a host the session had reached before the taint began (no host is ever learned
from the untrusted content). A tool's row says `writes = True` unless it is known to only read.

The records are brokerd's, never loopd's word; the same records always give the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Record:
    """What taint needs of one decision record: the call's sequence number in the log, the tool,
    whether the result brokerd returned was untrusted, and for a call that reached a host (a
    fetch that connected), that host, normalised."""

    seq: int
    tool: str
    untrusted: bool = False
    fetched_host: str | None = None


@dataclass(frozen=True, slots=True)
class Taint:
    """Where the taint began, and the hosts fetched strictly before it."""

    seq: int
    source: str  # "fetch of example.org" or "shell"
    trusted_hosts: frozenset[str]
    carried: bool = False  # from another epoch (its summary carries it)
    epoch: int = 0  # the epoch the untrusted result was returned in

    @property
    def reason(self) -> str:
        where = f"at call {self.seq}"
        if self.carried:
            where += f" in epoch {self.epoch} (the summary carries it into later epochs)"
        return f"the session read untrusted content from {self.source} {where}"


class Tracker:
    """One session's taint, kept as its records come, in log order (what `taint_of` computes
    over a whole list, without walking it again at every call)."""

    def __init__(self) -> None:
        self.hosts: set[str] = set()
        self.taint: Taint | None = None

    def add(self, rec: Record, epoch: int = 0) -> None:
        if self.taint is not None:
            return  # the first untrusted result is where it began; nothing lifts it
        if rec.untrusted:
            source = f"{rec.tool} of {rec.fetched_host}" if rec.fetched_host else rec.tool
            self.taint = Taint(rec.seq, source, frozenset(self.hosts), epoch=epoch)
        elif rec.fetched_host:
            self.hosts.add(rec.fetched_host.lower())

    def seen_from(self, epoch: int) -> Taint | None:
        """The taint as a call that claims `epoch` sees it: marked carried from another epoch."""
        t = self.taint
        if t is None or t.epoch == epoch:
            return t
        return Taint(t.seq, t.source, t.trusted_hosts, carried=True, epoch=t.epoch)


def taint_of(records: Iterable[Record], carried: Taint | None = None) -> Taint | None:
    """The session's taint, or None. `records` in log order (`policy.Ledger` keeps the same
    answer with a `Tracker` per session, over every epoch of it)."""
    if carried is not None:
        return carried
    tracker = Tracker()
    for rec in records:
        tracker.add(rec)
    return tracker.taint


def must_ask(
    taint: Taint | None, tool: str, writes: bool = True, host: str | None = None
) -> str | None:
    """None when the taint does not stop the call; else the reason the owner is asked.

    `writes` is the tool's row's; `host` the normalised host a call of a hosts tool names (None
    for other tools).
    """
    if taint is None or not writes:
        return None
    if host is not None:
        if host in taint.trusted_hosts:
            return None
        what = f"{tool} of {host}"
        return f"{what} asks because {taint.reason}; {what} could carry it out"
    return f"{tool} asks because {taint.reason}; {tool} can write or send"
