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

from boxmaker.brokerd.grants import GrantsError, Lookup, Mode, Rule, parse_grants, rule_of
from boxmaker.brokerd.policy import APPROVING, Decided, LogError, decide
from boxmaker.brokerd.taint import Record, Taint, Tracker
from boxmaker.brokerd.tools.kind import Tool
from boxmaker.session.chain import ChainError, verify_chain


class Ledger:
    """Each session's taint, fed the log's records in order. The taint is the session's, over
    all its epochs: a call that claims another epoch (higher or lower) sees it all the same, so
    loopd cannot shed it by naming a new epoch. Calls are numbered per session, from 1."""

    def __init__(self) -> None:
        self._sessions: dict[str, Tracker] = {}
        self._calls: dict[str, int] = {}
        self._open: dict[str, tuple[str, int, int, str]] = {}  # id -> session, epoch, call, tool

    def feed(self, rec: dict[str, Any]) -> None:
        kind = rec["type"]
        if kind == "request":
            session = rec.get("session", "")
            self._calls[session] = n = self._calls.get(session, 0) + 1
            self._open[rec["id"]] = (session, rec.get("epoch", 0), n, rec["tool"])
        elif kind in ("decision", "approval") and rec["mode"] == "deny":
            self._open.pop(rec["id"], None)  # nothing will be returned but the refusal
        elif kind == "result" and (call := self._open.pop(rec["id"], None)) is not None:
            session, epoch, n, tool = call
            record = Record(n, tool, bool(rec.get("untrusted")), rec.get("host"))
            self._sessions.setdefault(session, Tracker()).add(record, epoch)

    def taint(self, session: str, epoch: int = 0) -> Taint | None:
        tracker = self._sessions.get(session)
        return None if tracker is None else tracker.seen_from(epoch)

    # ---- carried across a rotation of the decision log (log.py's `carry` record) ----

    def snapshot(self) -> dict[str, Any]:
        """The ledger as JSON: what a new log file starts from, so a taint outlives rotation."""
        sessions = {}
        for session, tr in self._sessions.items():
            t = tr.taint
            taint = None if t is None else [t.seq, t.source, sorted(t.trusted_hosts), t.epoch]
            sessions[session] = {"hosts": sorted(tr.hosts), "taint": taint}
        return {"sessions": sessions, "calls": self._calls, "open": self._open}

    def restore(self, snap: dict[str, Any]) -> None:
        """Starts from a `snapshot()` (the records after it are fed as usual)."""
        for session, obj in snap["sessions"].items():
            tracker = self._sessions[session] = Tracker()
            tracker.hosts = set(obj["hosts"])
            if (t := obj["taint"]) is not None:
                tracker.taint = Taint(t[0], t[1], frozenset(t[2]), epoch=t[3])
        self._calls = {str(k): int(v) for k, v in snap["calls"].items()}
        self._open = {str(k): (v[0], v[1], v[2], v[3]) for k, v in snap["open"].items()}


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
        records, _ = verify_chain(data)
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
    count = 0
    for n, rec in enumerate(records, 1):
        kind = rec["type"]
        session = (rec.get("session", ""), rec.get("epoch", 0))
        taint = ledger.taint(*session) if kind == "request" else None  # before this record
        ledger.feed(rec)
        try:
            if kind == "start":
                rules, workspace = parse_grants(rec["grants"].encode(), table), rec["workspace"]
            elif kind == "grant":
                rules = (*rules, rule_from_json(rec["rule"], table))
        except GrantsError as exc:
            raise LogError(f"line {n}: {exc}") from None
        facts = rec.get("row") if kind == "request" and rows is not None else None
        if facts is not None:
            assert rows is not None
            row = rows(rec["tool"], facts)
            if isinstance(row, str):
                raise LogError(f"line {n}: {row}")
            schema_checked.add(rec["id"])
            pending[rec["id"]] = again = decide(
                _WithRow(table, row), rules, rec["tool"], rec["arguments"], workspace, taint
            )
            if again.hash != rec["hash"]:
                raise LogError(f"line {n}: the call's hash differs from the one logged")
            hashes[rec["id"]] = rec["hash"]
        elif kind == "request" and "." in rec["tool"] and table.get(rec["tool"]) is None:
            skipped[rec["id"]] = rec["hash"]
            if unreplayed is not None:
                unreplayed.append(rec["id"])
        elif kind == "request":
            pending[rec["id"]] = again = decide(
                table, rules, rec["tool"], rec["arguments"], workspace, taint
            )
            if again.hash != rec["hash"]:
                raise LogError(f"line {n}: the call's hash differs from the one logged")
            hashes[rec["id"]] = rec["hash"]
        elif kind == "decision" and rec["id"] in skipped:
            if rec["mode"] == "ask":
                asked[rec["id"]] = skipped[rec["id"]]
        elif kind == "decision":
            d = pending.pop(rec["id"]).decision
            if (str(d.mode), d.reason) != (rec["mode"], rec["reason"]):
                if _schema_refused(rec, schema_checked):
                    if unreplayed is not None:
                        unreplayed.append(rec["id"])
                    continue
                raise LogError(
                    f"line {n}: replay decides {d.mode} ({d.reason}), "
                    f"the log says {rec['mode']} ({rec['reason']})"
                )
            if d.mode is Mode.ASK:
                asked[rec["id"]] = hashes[rec["id"]]
            count += 1
        elif kind == "approval":
            bound = asked.pop(rec["id"], None)
            ok = rec["answer"] in APPROVING and rec["hash"] == bound
            if rec["mode"] != ("allow" if ok else "deny"):
                raise LogError(f"line {n}: approval {rec['answer']!r} cannot give {rec['mode']}")
            count += 1
    return count


def _schema_refused(rec: dict[str, Any], schema_checked: set[str]) -> bool:
    """A logged deny of an MCP call's arguments that only its listed schema could give."""
    return (
        rec["id"] in schema_checked
        and rec["mode"] == "deny"
        and rec["reason"].startswith("bad request: ")
    )
