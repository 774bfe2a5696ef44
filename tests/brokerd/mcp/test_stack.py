"""MCP servers through the whole stack: `loopd serve` against the scripted model, a real brokerd
whose config has [mcp.<name>] tables, and the servers in the sandbox. mcp-server-time's answer
reaches the session log and taints the session; an ungranted MCP tool asks the owner on
owner.sock (approved: it runs; denied: one clear result); a hostile server's garbage is one
clear result; and in each the turn goes on to its end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from boxmaker.brokerd.cli import main as brokerd_main
from boxmaker.proto import ApprovalNeededEvent, TurnDone
from tests.support.brokerd.approvals import owner_sees
from tests.support.brokerd.mcp.servers import hostile_server, python_server
from tests.support.brokerd.rig import Rig, loopd_and_brokerd, serve_loopd
from tests.support.cli import run_cli
from tests.support.procs import wait_for
from tests.support.serve import BOUND_S, ServeEnv, TurnClient
from tests.support.turn import calls, say

# A cold start in the sandbox is about a second (docs/mcp.md, Cost); the server's own bound,
# start_timeout_ms, is 20 s: loopd's tool timeout and the waits here are above it.
TOOL_TIMEOUT_MS = 60_000
WAIT_S = TOOL_TIMEOUT_MS / 1000 + BOUND_S

TIME_ALLOWED = """
[[grant]]
tool = "time.get_current_time"
mode = "allow"

[[grant]]
tool = "write_file"
mode = "allow"
"""
NOTHING_GRANTED = """
[[grant]]
tool = "read_file"
mode = "allow"
"""
EVIL_ALLOWED = """
[[grant]]
tool = "evil.garbage"
mode = "allow"

[[grant]]
tool = "evil.echo"
mode = "allow"
"""


@pytest.fixture
def stack(request: pytest.FixtureRequest) -> Iterator[tuple[ServeEnv, Rig]]:
    grants, servers = request.param
    with loopd_and_brokerd(grants) as (env, rig):
        rig.mcp = servers
        rig.broker = {"approval_timeout_ms": int(WAIT_S * 1000)}
        rig.start()
        serve_loopd(env, rig.socket, TOOL_TIMEOUT_MS)
        yield env, rig


TIME = python_server("time", "mcp_server_time")
EVIL = hostile_server("evil", call_timeout_ms=5000)


def tool_results(env: ServeEnv, session: str) -> list[str]:
    return [str(r["content"]) for r in env.log_lines(session) if r["type"] == "tool_result"]


def decisions(rig: Rig) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in rig.log.read_bytes().splitlines()]


def approval(turn: TurnClient) -> ApprovalNeededEvent:
    return wait_for(
        lambda: next((f for f in turn.frames if isinstance(f, ApprovalNeededEvent)), None),
        "an approval_needed event on the channel",
        WAIT_S,
    )


def turn_done(turn: TurnClient) -> None:
    wait_for(
        lambda: turn.frames and isinstance(turn.frames[-1], TurnDone), "the turn's end", WAIT_S
    )


def now_in(zone: str) -> dict[str, Any]:
    return {"name": "time.get_current_time", "arguments": {"timezone": zone}}


@pytest.mark.parametrize("stack", [(TIME_ALLOWED, TIME)], indirect=True)
def test_mcp_server_time_answers_and_taints_the_session(stack: tuple[ServeEnv, Rig]) -> None:
    env, rig = stack
    write = {"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}
    env.model.load(
        [
            calls(("call_tool", now_in("Europe/Paris")), prefix="t"),
            calls(("call_tool", write), prefix="w"),  # allowed, but asked: the session is tainted
            say("done"),
        ]
    )
    turn = TurnClient(env.socket, "s1", "what time is it in Paris?", resume=False)
    needed = approval(turn)
    assert needed.tool == "write_file"
    shown = str(owner_sees(rig, needed.id, "no")["summary"])
    assert "a.txt" in shown
    turn_done(turn)
    got, wrote = tool_results(env, "s1")
    assert '"timezone": "Europe/Paris"' in got, got
    assert '"datetime"' in got
    assert wrote.startswith("error: denied: the owner did not approve (no)"), wrote
    assert "time.get_current_time" in wrote  # why it asked: the untrusted result
    assert not (rig.workspace / "a.txt").exists()
    results = [r for r in decisions(rig) if r["type"] == "result"]
    assert results[0]["untrusted"] is True
    # brokerd verify: the chain holds, every decision replays, the MCP call on its row facts
    out = run_cli(brokerd_main, ["verify", "--log", str(rig.log)])
    assert out.status == 0, out.stderr
    assert "3 decision(s) replay the same\n" in out.stdout  # the MCP call decided again too


@pytest.mark.parametrize("stack", [(NOTHING_GRANTED, TIME)], indirect=True)
@pytest.mark.parametrize("said", ["yes", "no"])
def test_an_ungranted_mcp_tool_asks_the_owner(stack: tuple[ServeEnv, Rig], said: str) -> None:
    env, rig = stack
    env.model.load([calls(("call_tool", now_in("UTC\u202e")), prefix="t"), say("done")])
    turn = TurnClient(env.socket, "s2", "what time is it?", resume=False)
    needed = approval(turn)
    assert needed.tool == "time.get_current_time"
    shown = str(owner_sees(rig, needed.id, said)["summary"])
    # the whole call, escaped: the server, its sandbox, and every argument
    assert "MCP server time, sandboxed: workspace none, no network" in shown, shown
    assert '"UTC\\u202e"' in shown
    turn_done(turn)
    (got,) = tool_results(env, "s2")
    if said == "yes":  # the server ran it and refused the zone, in its own words
        assert "error: denied" not in got
        assert "UTC\u202e" in got or "UTC\\u202e" in got, got
    else:
        assert got.startswith("error: denied: the owner did not approve (no)"), got
    modes = [r["mode"] for r in decisions(rig) if r["type"] == "decision"]
    assert modes == ["ask"]


@pytest.mark.parametrize("stack", [(EVIL_ALLOWED, EVIL)], indirect=True)
def test_a_hostile_servers_garbage_is_one_clear_result(stack: tuple[ServeEnv, Rig]) -> None:
    env, rig = stack
    echo = {"name": "evil.echo", "arguments": {"target": "still here"}}
    env.model.load(
        [
            calls(("call_tool", {"name": "evil.garbage", "arguments": {}}), prefix="g"),
            calls(("call_tool", echo), prefix="e"),  # asked (tainted); the server restarts
            say("done"),
        ]
    )
    turn = TurnClient(env.socket, "s3", "go", resume=False)
    needed = approval(turn)  # the garbage quoted the server: the session is tainted
    assert needed.tool == "evil.echo"
    assert "untrusted content from evil.garbage" in needed.summary
    owner_sees(rig, needed.id, "yes")
    turn_done(turn)
    garbage, echoed = tool_results(env, "s3")
    assert garbage.startswith("evil.garbage: the server sent a line that is not JSON-RPC"), garbage
    assert "the server was stopped" in garbage
    assert echoed == "echo still here", echoed
