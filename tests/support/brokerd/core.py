"""The brokerd cores with the built-in table of tools, as the tests call them: by tool name."""

from __future__ import annotations

from collections.abc import Sequence

from boxmaker.brokerd import amend, ledger, policy
from boxmaker.brokerd import grants as grants_mod
from boxmaker.brokerd.grants import Rule
from boxmaker.brokerd.taint import Taint
from boxmaker.brokerd.tools.kind import Args, Target, Tool
from boxmaker.brokerd.tools.table import TABLE


def tool(name: str) -> Tool:
    row = TABLE.get(name)
    assert row is not None, name
    return row


def parse_grants(data: bytes) -> tuple[Rule, ...]:
    return grants_mod.parse_grants(data, TABLE)


def decision(rules: Sequence[Rule], name: str, target: Target) -> policy.Decision:
    return policy.verdict(rules, tool(name), target)


def decide(
    rules: tuple[Rule, ...], name: str, arguments: str, workspace: str, taint: Taint | None = None
) -> policy.Decided:
    return policy.decide(TABLE, rules, name, arguments, workspace, taint)


def replay(data: bytes) -> int:
    return ledger.replay(data, TABLE)


def always_rule(name: str, target: Target, args: Args | None = None) -> Rule | None:
    got = amend.always_rule(TABLE, tool(name), target, args or {})
    return got if isinstance(got, Rule) else None


def listed(rules: Sequence[Rule], name: str) -> bool:
    return policy.listed(rules, tool(name))


WS = "/srv/ws"


READ_DENIED = b"""
[[grant]]
tool = "read_file"
mode = "allow"

[[grant]]
tool = "read_file"
mode = "deny"
paths = ["secrets"]
files = ["notes/pin.txt"]

[[grant]]
tool = "list_dir"
mode = "allow"

[[grant]]
tool = "write_file"
mode = "allow"

[[grant]]
tool = "edit_file"
mode = "allow"

[[grant]]
tool = "shell"
mode = "allow"
"""
