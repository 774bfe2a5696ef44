"""One call's decision from its raw request, and the replay of brokerd's log. [core]

`decide` is the only path from a request to allow/ask/deny: brokerd runs it live, `replay` runs it
again over the log, so a replay reproduces every decision or names the first line that differs.

The log (`log.py` writes it) is a file of JSON lines chained like a session log
(`session.chain`: each line's `prev` is the hex SHA-256 of the line before). The records:
`start` (the grants file's text), `request`, `decision`, `approval`, `grant` (a rule an
"always" added), `result`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from boxmaker.brokerd.grants import (
    BadPath,
    Decision,
    Mode,
    Rule,
    call_hash,
    canonical_args,
    decision,
    parse_grants,
    target_of,
)
from boxmaker.brokerd.tools.spec import CLOCK, parse_arguments
from boxmaker.session.chain import ChainError, verify_chain

APPROVING = ("yes", "always")


@dataclass(frozen=True, slots=True)
class Decided:
    decision: Decision
    args: dict[str, Any] | None  # None when the arguments did not parse
    target: tuple[str, ...] | str | None
    hash: str


def decide(rules: tuple[Rule, ...], tool: str, arguments: str, workspace: str) -> Decided:
    """The decision on one request as it arrived (the tool's name, the arguments' JSON text)."""
    args = parse_arguments(tool, arguments)
    if isinstance(args, str):
        return Decided(
            Decision(Mode.DENY, f"bad request: {args}"),
            None,
            None,
            call_hash(tool, {"unparsed": arguments}),
        )
    if tool == CLOCK:
        why = "clock reads nothing: no grant needed"
        return Decided(Decision(Mode.ALLOW, why), args, "", call_hash(tool, args))
    try:
        target = target_of(tool, args, workspace)
    except BadPath as exc:
        return Decided(Decision(Mode.DENY, f"bad path: {exc}"), args, None, call_hash(tool, args))
    return Decided(decision(rules, tool, target), args, target, call_hash(tool, args))


def rule_json(rule: Rule) -> dict[str, Any]:
    return {
        "tool": rule.tool,
        "mode": str(rule.mode),
        "paths": ["/".join(p) for p in rule.paths],
        "files": list(rule.files),
    }


def rule_from_json(obj: dict[str, Any]) -> Rule:
    paths = tuple(tuple(p for p in s.split("/") if p) for s in obj["paths"])
    return Rule(obj["tool"], Mode(obj["mode"]), paths=paths, files=tuple(obj["files"]))


class LogError(Exception):
    """A replayed decision differs from the logged one, or the chain breaks; "line N: ..."."""


def replay(data: bytes) -> int:
    """Checks the chain, then decides every request again and compares. Returns the number of
    decisions reproduced. Raises LogError at the first line that differs."""
    try:
        records, _ = verify_chain(data)
    except ChainError as exc:
        raise LogError(str(exc)) from None
    rules: tuple[Rule, ...] = ()
    workspace = ""
    hashes: dict[str, str] = {}  # request id -> its hash
    asked: dict[str, str] = {}  # the requests that asked -> their hash, for the approvals
    pending: dict[str, Decided] = {}
    count = 0
    for n, rec in enumerate(records, 1):
        kind = rec["type"]
        if kind == "start":
            rules, workspace = parse_grants(rec["grants"].encode()), rec["workspace"]
        elif kind == "request":
            pending[rec["id"]] = decide(rules, rec["tool"], rec["arguments"], workspace)
            if pending[rec["id"]].hash != rec["hash"]:
                raise LogError(f"line {n}: the call's hash differs from the one logged")
            hashes[rec["id"]] = rec["hash"]
        elif kind == "decision":
            again = pending.pop(rec["id"]).decision
            if (str(again.mode), again.reason) != (rec["mode"], rec["reason"]):
                raise LogError(
                    f"line {n}: replay decides {again.mode} ({again.reason}), "
                    f"the log says {rec['mode']} ({rec['reason']})"
                )
            if again.mode is Mode.ASK:
                asked[rec["id"]] = hashes[rec["id"]]
            count += 1
        elif kind == "approval":
            bound = asked.pop(rec["id"], None)
            ok = rec["answer"] in APPROVING and rec["hash"] == bound
            if rec["mode"] != ("allow" if ok else "deny"):
                raise LogError(f"line {n}: approval {rec['answer']!r} cannot give {rec['mode']}")
            count += 1
        elif kind == "grant":
            rules = (*rules, rule_from_json(rec["rule"]))
    return count


def request_fields(call_id: str, tool: str, arguments: str, decided: Decided) -> dict[str, Any]:
    shown = arguments if decided.args is None else canonical_args(decided.args)
    return {
        "id": call_id,
        "tool": tool,
        "arguments": arguments,
        "canonical": shown,
        "hash": decided.hash,
    }
