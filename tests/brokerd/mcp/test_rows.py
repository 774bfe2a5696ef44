"""MCP tools as rows of brokerd's table: granted, decided, logged and tainting like its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.approvals import Held
from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.grants import GrantsError, Mode, parse_grants
from boxmaker.brokerd.mcp.manager import McpManager
from boxmaker.brokerd.mcp.rows import families
from boxmaker.brokerd.policy import decide, listed
from boxmaker.brokerd.tools.kind import GrantKind
from boxmaker.brokerd.tools.table import BUILTIN, Table
from tests.support.brokerd.mcp.servers import Rig, broker_config, hostile_server, python_server

APPROVAL_MS = 300
GRANTS = b"""
[[grant]]
tool = "time.get_current_time"
mode = "allow"

[[grant]]
tool = "evil.echo"
mode = "allow"

[[grant]]
tool = "evil.inject"
mode = "allow"

[[grant]]
tool = "time.convert_time"
mode = "deny"
"""


@pytest.fixture
def manager(rig: Rig) -> McpManager:
    return rig.manager(
        {**python_server("time", "mcp_server_time"), **hostile_server("evil", "--bad-schemas")}
    )


@pytest.fixture
def table(manager: McpManager) -> Table:
    return Table(BUILTIN, families(manager, lambda _ctx: 0))


def test_mcp_tools_are_rows_beside_brokerds_own(rig: Rig, table: Table) -> None:
    names = table.names()
    assert "read_file" in names
    assert "time.get_current_time" in names
    assert "evil.echo" in names
    row = table.get("time.get_current_time")
    assert row is not None
    assert row.grant is GrantKind.ARGS
    assert row.strings == frozenset({"timezone"})
    assert row.writes
    assert row.untrusted
    assert table.get("time.nope") is None
    assert table.get("evil.numeric") is None  # a number argument: the table cannot check it
    assert rig.log_has("tool evil.numeric left out of the table: its argument x is of type")


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ('{"timezone": 3}', "timezone must be a string"),
        ('{"zone": "UTC"}', "unknown argument(s) zone"),
        ("{}", "missing argument timezone"),
        ("[]", "must be a JSON object"),
        ("not json", "not JSON"),
    ],
)
def test_bad_arguments_are_denied_before_the_server_sees_them(
    rig: Rig, table: Table, arguments: str, why: str
) -> None:
    rules = parse_grants(GRANTS, table)
    decided = decide(table, rules, "time.get_current_time", arguments, str(rig.workspace))
    assert decided.decision.mode is Mode.DENY
    assert why in decided.decision.reason


def test_grants_decide_per_tool(rig: Rig, table: Table) -> None:
    rules = parse_grants(GRANTS, table)
    ws = str(rig.workspace)
    allowed = decide(table, rules, "time.get_current_time", '{"timezone": "UTC"}', ws)
    assert allowed.decision.mode is Mode.ALLOW
    denied = decide(table, rules, "time.convert_time", "{}", ws)
    assert denied.decision.mode is Mode.DENY
    ungranted = decide(table, rules, "evil.read_file", '{"target": "/etc/shadow"}', ws)
    assert ungranted.decision.mode is Mode.ASK  # no rule: the owner is asked (issue 31)
    assert "evil.read_file asks by default" in ungranted.decision.reason
    evil_read = table.get("evil.read_file")
    assert evil_read is not None
    assert listed(rules, evil_read)  # no rule: it asks, so find_tool lists it
    convert = table.get("time.convert_time")
    assert convert is not None
    assert not listed(rules, convert)  # denied by its rule: not listed


def test_grants_naming_mcp_tools_start_no_server(manager: McpManager, table: Table) -> None:
    """brokerd reads its grants at start and at each "always": a rule naming a server's tool
    is parsed without starting that server; a tool name no server could have is refused."""
    rules = parse_grants(GRANTS, table)
    assert [r.tool for r in rules][:2] == ["time.get_current_time", "evil.echo"]
    assert [s.starts for s in manager.servers.values()] == [0, 0]
    assert manager.tools.latest == {}
    for bad in ("time.", "time.a b", "time.é", "time." + "x" * 65, "nosuch.tool"):
        with pytest.raises(GrantsError):
            parse_grants(f'[[grant]]\ntool = "{bad}"\nmode = "allow"\n'.encode(), table)
    assert [s.starts for s in manager.servers.values()] == [0, 0]


def test_the_owner_sees_the_whole_call_escaped(table: Table) -> None:
    row = table.get("time.get_current_time")
    assert row is not None
    shown = row.summary(None, "", {"timezone": "UTC\u202e\nrm -rf"})  # type: ignore[arg-type]
    assert "\n" not in shown
    assert "\u202e" not in shown
    assert '"UTC\\u202e\\nrm -rf"' in shown
    assert "MCP server time, sandboxed: workspace none, no network" in shown


@pytest.fixture
def broker(rig: Rig, table: Table) -> Iterator[Broker]:
    b = Broker(broker_config(rig, GRANTS, APPROVAL_MS), table=table)
    try:
        yield b
    finally:
        b.close()


def test_through_the_broker_a_result_is_logged_and_taints(rig: Rig, broker: Broker) -> None:
    asked: list[Held] = []
    lock = threading.Lock()

    def notify(held: Held, _brief: str) -> None:
        with lock:
            asked.append(held)

    got = broker.call("time.get_current_time", '{"timezone": "UTC"}', notify, "s1")
    assert '"timezone": "UTC"' in got.content
    assert got.untrusted
    injected = broker.call("evil.inject", "{}", notify, "s2")
    assert injected.untrusted
    # s2 is tainted now: an MCP tool writes, so even an allowed one is asked, and no answer
    # within approval_timeout_ms is a no.
    held = broker.call("evil.echo", '{"target": "x"}', notify, "s2")
    assert held.content.startswith("error: denied: the owner did not approve (timeout)")
    assert "read untrusted content from evil.inject" in held.content
    assert [h.call.tool for h in asked] == ["evil.echo"]
    assert '{"target": "x"}' in asked[0].call.summary
    fresh = broker.call("evil.echo", '{"target": "y"}', notify, "s3")
    assert fresh.content == "echo y"
    records = [orjson.loads(line) for line in Path(broker.config.log).read_bytes().splitlines()]
    results = [r for r in records if r.get("type") == "result"]
    assert [r["untrusted"] for r in results] == [True, True, True]
