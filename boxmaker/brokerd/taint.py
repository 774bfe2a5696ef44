"""Taint, recomputed from brokerd's own decision records of the session's epoch. [core]

A session is tainted from the first result brokerd returned with `untrusted: true` in the
current epoch (or a taint carried over from the previous epoch's summary). While tainted, every
call that can write or send asks the owner, whatever its grant: a call is let through on its
grant alone only if it is known to read and nothing else, or it is a `fetch` of a host the
session had fetched before the taint began (no host is ever learned from the untrusted content).
Unknown tools count as writers: a tool added later asks until it is listed here.

The records are brokerd's, never loopd's word; the same records always give the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Tools that only read: their results may taint, but calling them cannot carry data out.
READ_ONLY = frozenset({"read_file", "list_dir", "find_tool", "clock", "echo"})
FETCH = "fetch"


@dataclass(frozen=True, slots=True)
class Record:
    """What taint needs of one decision record: the call's sequence number in the log, the tool,
    whether the result brokerd returned was untrusted, and for a fetch that connected, the host
    (lower case, as in the URL) it fetched."""

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
    carried: bool = False  # from the previous epoch's summary

    @property
    def reason(self) -> str:
        where = "in the previous epoch" if self.carried else f"at call {self.seq}"
        return f"the session read untrusted content from {self.source} {where}"


def taint_of(records: Iterable[Record], carried: Taint | None = None) -> Taint | None:
    """The session's taint, or None. `records` in log order; only the current epoch's."""
    if carried is not None:
        return carried
    hosts: set[str] = set()
    for rec in records:
        if rec.untrusted:
            source = f"fetch of {rec.fetched_host}" if rec.fetched_host else rec.tool
            return Taint(rec.seq, source, frozenset(hosts))
        if rec.tool == FETCH and rec.fetched_host:
            hosts.add(rec.fetched_host.lower())
    return None


def must_ask(taint: Taint | None, tool: str, host: str | None = None) -> str | None:
    """None when the taint does not stop the call; else the reason the owner is asked.

    `host` is the host a proposed fetch names (None for other tools, or a URL with no host).
    """
    if taint is None or tool in READ_ONLY:
        return None
    if tool == FETCH:
        if host is not None and host.lower() in taint.trusted_hosts:
            return None
        what = f"fetch of {host}" if host else "fetch"
        return f"{what} asks because {taint.reason}; {what} could carry it out"
    return f"{tool} asks because {taint.reason}; {tool} can write or send"
