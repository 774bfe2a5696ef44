"""The replay of brokerd's decision log, and the taint ledger. [core]

Both brokerd and the replay keep the ledger.
Taint enters the decision the same way both times: `Ledger` reads the log's records in order
(brokerd feeds it each record as it appends it, and the whole log at start; replay feeds it as
it goes), and a request is decided with its session's taint as the records before it give it.
So a restart recomputes the taint from the log, and a replay reproduces every taint-driven ask.

The log (`log.py` writes it) is a file of JSON lines chained like a session log
(`session.chain`: each line's `prev` is the hex SHA-256 of the line before). The records:
`start` (the grants file's text), `request` (with the session and the epoch loopd claims, for
audit: the taint is the session's whatever the epoch), `decision`, `approval`, `grant` (the rule
an "always" added), `result` (with `untrusted`, and the host a call reached).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from boxmaker.brokerd.grants import GrantsError, Lookup, Mode, Rule, parse_grants, rule_of
from boxmaker.brokerd.policy import APPROVING, Decided, LogError, decide
from boxmaker.brokerd.taint import Record, Taint, Tracker
from boxmaker.brokerd.tools.kind import Tool
from boxmaker.proto.decision import (
    Approval,
    Carry,
    Decision,
    Grant,
    Logged,
    Request,
    Result,
    Start,
)
from boxmaker.session.chain import ChainError, verify_records

MAX_CARRY_BYTES = 1 << 20  # a carry record's ledger, at most (log.py reads it at every start)
MAX_CARRIED_HOSTS = 16  # of a tainted session's trusted hosts: fewer means more asks, never less
MAX_OPEN = 1024  # calls in flight at a rotation (bounded by max_connections in practice)
CARRY_VERSION = 2


class Ledger:
    """Each session's taint, fed the log's records in order. The taint is the session's, over
    all its epochs: a call that claims another epoch (higher or lower) sees it all the same, so
    loopd cannot shed it by naming a new epoch. Calls are numbered per session, from 1 (from
    the last rotation on, for a session the carry does not name)."""

    def __init__(self) -> None:
        self._sessions: dict[str, Tracker] = {}
        self._calls: dict[str, int] = {}
        self._open: dict[str, tuple[str, int, int, str]] = {}  # id -> session, epoch, call, tool
        self._seen: dict[str, int] = {}  # session -> the log seq of its last request

    def feed(self, line: Logged) -> None:
        rec = line.record
        if isinstance(rec, Request):
            session = rec.session
            self._calls[session] = n = self._calls.get(session, 0) + 1
            self._open[rec.id] = (session, rec.epoch, n, rec.tool)
            self._seen[session] = line.seq
        elif isinstance(rec, Start):
            self._open.clear()  # a new brokerd: no result of a call the last one ran will come
        elif isinstance(rec, Decision | Approval) and rec.mode == "deny":
            self._open.pop(rec.id, None)  # nothing will be returned but the refusal
        elif isinstance(rec, Result) and (call := self._open.pop(rec.id, None)) is not None:
            session, epoch, n, tool = call
            record = Record(n, tool, rec.untrusted, rec.host)
            self._sessions.setdefault(session, Tracker()).add(record, epoch)

    def taint(self, session: str, epoch: int = 0) -> Taint | None:
        tracker = self._sessions.get(session)
        return None if tracker is None else tracker.seen_from(epoch)

    # ---- carried across a rotation of the decision log (log.py's `carry` record) ----

    def snapshot(self) -> dict[str, Any]:
        """What decides, as JSON, bounded (MAX_CARRY_BYTES): the calls in flight (MAX_OPEN, the
        newest), then the tainted sessions, most recently seen first, each with at most
        MAX_CARRIED_HOSTS trusted hosts. An untainted session carries nothing (its hosts only
        widen a later taint's trusted hosts; without them it asks more, never less); its calls
        are numbered from 1 again after the rotation. Deterministic: replay computes the same."""
        opened = list(self._open.items())[-MAX_OPEN:]
        room = MAX_CARRY_BYTES - len(orjson.dumps({"v": 2, "tainted": {}, "open": dict(opened)}))
        tainted: dict[str, list[Any]] = {}
        order = sorted(
            (s for s, tr in self._sessions.items() if tr.taint is not None),
            key=lambda s: (-self._seen.get(s, 0), s),
        )
        for session in order:
            t = self._sessions[session].taint
            assert t is not None
            hosts = sorted(t.trusted_hosts)[:MAX_CARRIED_HOSTS]
            entry = [t.seq, t.source, hosts, t.epoch, self._seen.get(session, 0)]
            room -= len(orjson.dumps({session: entry})) + 1
            if room < 0:
                break  # aged out: the least recently seen tainted sessions
            tainted[session] = entry
        return {"v": CARRY_VERSION, "tainted": tainted, "open": {k: list(v) for k, v in opened}}

    def restore(self, snap: dict[str, Any]) -> None:
        """Starts again from a carry's snapshot (the records after it are fed as usual).
        LogError, one line, when its shape is not one brokerd writes (check_carry)."""
        check_carry(snap)
        self._sessions, self._calls, self._seen = {}, {}, {}
        self._open = {str(k): (v[0], v[1], v[2], v[3]) for k, v in snap["open"].items()}
        if "sessions" in snap:  # a carry of the first format: every session, every count
            for session, obj in snap["sessions"].items():
                tracker = self._sessions[session] = Tracker()
                tracker.hosts = set(obj["hosts"])
                if (t := obj["taint"]) is not None:
                    tracker.taint = Taint(t[0], t[1], frozenset(t[2]), epoch=t[3])
            self._calls = {str(k): int(v) for k, v in snap["calls"].items()}
            return
        for session, (seq, source, hosts, epoch, seen) in snap["tainted"].items():
            tracker = self._sessions[session] = Tracker()
            tracker.taint = Taint(seq, source, frozenset(hosts), epoch=epoch)
            self._seen[session] = seen


def _uint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(h, str) for h in v)


def _open_ok(v: Any) -> bool:
    return (
        isinstance(v, list)
        and len(v) == 4
        and isinstance(v[0], str)
        and _uint(v[1])
        and _uint(v[2])
        and isinstance(v[3], str)
    )


def _taint_ok(t: Any, n: int) -> bool:
    return (
        isinstance(t, list)
        and len(t) == n
        and _uint(t[0])
        and isinstance(t[1], str)
        and _strs(t[2])
        and all(_uint(x) for x in t[3:])
    )


def _v1_session_ok(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and set(obj) == {"hosts", "taint"}
        and _strs(obj["hosts"])
        and (obj["taint"] is None or _taint_ok(obj["taint"], 4))
    )


def check_carry(snap: Any) -> None:
    """LogError saying what is wrong when `snap` is not a carry's ledger as brokerd writes it
    (this version's, or the first format's: `sessions`, `calls`, `open`)."""
    if not isinstance(snap, dict):
        raise LogError("the carry's ledger is not an object")
    if set(snap) == {"v", "tainted", "open"} and snap["v"] == CARRY_VERSION:
        parts_ok = (
            isinstance(snap["tainted"], dict)
            and all(_taint_ok(t, 5) for t in snap["tainted"].values())
            and isinstance(snap["open"], dict)
            and all(_open_ok(v) for v in snap["open"].values())
        )
    elif set(snap) == {"sessions", "calls", "open"}:
        parts_ok = (
            isinstance(snap["sessions"], dict)
            and all(_v1_session_ok(o) for o in snap["sessions"].values())
            and isinstance(snap["calls"], dict)
            and all(_uint(v) for v in snap["calls"].values())
            and isinstance(snap["open"], dict)
            and all(_open_ok(v) for v in snap["open"].values())
        )
    else:
        keys = ", ".join(sorted(snap)) or "none"
        raise LogError(
            f"the carry's ledger has keys {keys}; brokerd writes v, tainted and open "
            "(the log was edited: restore it from a backup)"
        )
    if not parts_ok:
        raise LogError("the carry's ledger has a value of the wrong shape (the log was edited)")


def rule_from_json(obj: dict[str, Any], table: Lookup) -> Rule:
    """A `grant` record's rule (Rule.to_json wrote it: every key, some empty)."""
    kept = {k: v for k, v in obj.items() if v != [] and (k, v) != ("class", "public")}
    return rule_of(kept, "grant record", table)


Rows = Callable[[str, dict[str, Any]], Tool | str]  # a request line's row facts -> its row


class _WithRow:
    """`table` with one more row: the one a request line's facts give (an MCP tool's)."""

    def __init__(self, table: Lookup, row: Tool) -> None:
        self.table, self.row = table, row

    def get(self, name: str) -> Tool | None:
        return self.row if name == self.row.name else self.table.get(name)

    def grant_row(self, name: str) -> Tool | None:
        return self.table.grant_row(name)

    def grant_names(self) -> list[str]:
        return self.table.grant_names()

    def names(self) -> tuple[str, ...]:
        return self.table.names()


def replay(
    data: bytes, table: Lookup, unreplayed: list[str] | None = None, rows: Rows | None = None
) -> int:
    """Checks the chain, then decides every request again and compares. Returns the number of
    decisions reproduced. Raises LogError at the first line that differs.

    A call of a tool named at run time (`<server>.<tool>`, an MCP server's) is decided again
    on the row `rows` builds from the facts its request line carries (its arguments' types,
    the server's cwd, whether it writes, whether it is trusted): no server is started. What
    cannot be decided again goes to `unreplayed` (its approval still checked against the hash
    logged): a request line without facts (a log from before they were written, or a tool
    that was not listed), and a call the server's schema refused (`bad request`: the log holds
    the types, not the schema)."""
    try:
        records, _ = verify_records(data)
    except ChainError as exc:
        raise LogError(str(exc)) from None
    rules: tuple[Rule, ...] = ()
    workspace = ""
    hashes: dict[str, str] = {}  # request id -> its hash
    asked: dict[str, str] = {}  # the requests that asked -> their hash, for the approvals
    pending: dict[str, Decided] = {}
    skipped: dict[str, str] = {}  # the MCP calls not decided again -> their hash
    schema_checked: set[str] = set()  # MCP calls decided on facts, not on their schema
    ledger = Ledger()
    rows_logged = False  # this brokerd's start says every MCP request carries its row
    cut: dict[str, int] = {}  # requests logged with their arguments cut -> their line
    rowless: dict[str, int] = {}  # MCP requests without a row where one was due -> their line
    count = 0
    for n, line in enumerate(records, 1):
        rec = line.record
        # the session's taint before this record
        taint = ledger.taint(rec.session, rec.epoch) if isinstance(rec, Request) else None
        if isinstance(rec, Carry):
            _carried(ledger, rec.ledger, n)
        ledger.feed(line)
        try:
            if isinstance(rec, Start):
                rules, workspace = parse_grants(rec.grants.encode(), table), rec.workspace
                rows_logged = bool(rec.rows)
            elif isinstance(rec, Grant):
                rules = (*rules, rule_from_json(rec.rule, table))
        except GrantsError as exc:
            raise LogError(f"line {n}: {exc}") from None
        if isinstance(rec, Request):
            facts = rec.row if rows is not None else None
            if rec.size is not None:
                cut[rec.id] = n  # logged cut: only a refusal may follow
            elif facts is not None:
                assert rows is not None
                row = rows(rec.tool, facts)
                if isinstance(row, str):
                    raise LogError(f"line {n}: {row}")
                schema_checked.add(rec.id)
                pending[rec.id] = again = decide(
                    _WithRow(table, row), rules, rec.tool, rec.arguments, workspace, taint
                )
                if again.hash != rec.hash:
                    raise LogError(f"line {n}: the call's hash differs from the one logged")
                hashes[rec.id] = rec.hash
            elif "." in rec.tool and table.get(rec.tool) is None:
                if rows_logged and rows is not None:
                    rowless[rec.id] = n  # only a refusal may follow (an unlisted tool's)
                skipped[rec.id] = rec.hash
                if unreplayed is not None:
                    unreplayed.append(rec.id)
            else:
                pending[rec.id] = again = decide(
                    table, rules, rec.tool, rec.arguments, workspace, taint
                )
                if again.hash != rec.hash:
                    raise LogError(f"line {n}: the call's hash differs from the one logged")
                hashes[rec.id] = rec.hash
        elif isinstance(rec, Decision) and rec.id in cut:
            if rec.mode != "deny":
                raise LogError(
                    f"line {cut[rec.id]}: a request logged cut (only a denied call's is), "
                    f"then {rec.mode} at line {n} (edited?)"
                )
        elif isinstance(rec, Decision) and rec.id in rowless and rec.mode != "deny":
            raise LogError(
                f"line {rowless[rec.id]}: an MCP request without its row, in a log whose "
                f"start says every one carries it, then {rec.mode} at line {n} (edited?)"
            )
        elif isinstance(rec, Decision) and rec.id in skipped:
            if rec.mode == "ask":
                asked[rec.id] = skipped[rec.id]
        elif isinstance(rec, Decision):
            d = pending.pop(rec.id).decision
            if (str(d.mode), d.reason) != (rec.mode, rec.reason):
                if _schema_refused(rec, schema_checked):
                    if unreplayed is not None:
                        unreplayed.append(rec.id)
                    continue
                raise LogError(
                    f"line {n}: replay decides {d.mode} ({d.reason}), "
                    f"the log says {rec.mode} ({rec.reason})"
                )
            if d.mode is Mode.ASK:
                asked[rec.id] = hashes[rec.id]
            count += 1
        elif isinstance(rec, Approval):
            bound = asked.pop(rec.id, None)
            ok = rec.answer in APPROVING and rec.hash == bound
            if rec.mode != ("allow" if ok else "deny"):
                raise LogError(f"line {n}: approval {rec.answer!r} cannot give {rec.mode}")
            count += 1
    return count


def _carried(ledger: Ledger, snap: Any, n: int) -> None:
    """A carry: its shape checked; one of this version must be what the records before it give
    (brokerd restores from it at the rotation and at every start, so replay does too)."""
    try:
        check_carry(snap)
    except LogError as exc:
        raise LogError(f"line {n}: {exc}") from None
    if "sessions" in snap:
        return  # the first format carried everything: the ledger replay holds is the same
    if snap != ledger.snapshot():
        raise LogError(f"line {n}: the carry is not what the records before it give (edited?)")
    ledger.restore(snap)


def _schema_refused(rec: Decision, schema_checked: set[str]) -> bool:
    """A logged deny of an MCP call's arguments that only its listed schema could give."""
    return (
        rec.id in schema_checked and rec.mode == "deny" and rec.reason.startswith("bad request: ")
    )
