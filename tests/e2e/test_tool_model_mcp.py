"""The tool model and an MCP server through the whole stack (issue 31 item 6): `bxctl chat` ->
loopd -> brokerd -> mcp-server-time in its sandbox, on the qwen-coder profile's real llama-server
(the package's one stack, tests/e2e/conftest.py, shared with test_tool_model.py).

`[tools] core` cannot name an MCP tool (a core name has no dot, loopd/config.py), so the model
reaches `time.get_current_time` through find_tool/call_tool, as the profile offers every tool it
does not name. One fresh session, one short prompt; judged on the records: the call with the
named timezone, the ToolResult holding that zone's time, marked untrusted (the server is not
trusted), the answer quoting it, and brokerd's decision log.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest

from boxmaker.verify.checks import paired_calls
from boxmaker.verify.device import Run
from tests.support.agent.tool_model import MCP_TIME_TOOL, results_of, turn

TOOL = MCP_TIME_TOOL
ZONE = "Asia/Tokyo"  # +09:00 all year: no daylight saving to guess
# Named whole, as a user of a small model learns to: "Use call_tool to call time.get_current_time"
# made it call call_tool("clock") three times (clock is core; the repeat rule ended the turn).
PROMPT = (
    f"What is the current time in {ZONE}? Call call_tool with name "
    f'"{TOOL}" and arguments {{"timezone": "{ZONE}"}}.'
)


@pytest.fixture
def run(tool_model: Run) -> Run:
    return tool_model  # conftest.py: one stack for the package, the time server in it


def _calls_of(records: list[Any]) -> list[tuple[str, object]]:
    """(tool, arguments) of every call, a call_tool's as the tool it names."""
    out = []
    for call, _result in paired_calls(records):
        args = orjson.loads(call.arguments)
        if call.name == "call_tool" and isinstance(args, dict):
            out.append((str(args.get("name")), args.get("arguments")))
        else:
            out.append((call.name, args))
    return out


def test_the_model_asks_the_time_server_for_a_zone(run: Run) -> None:
    answer, records = turn(run, "mcp-time", PROMPT)
    calls = _calls_of(records)
    assert (TOOL, {"timezone": ZONE}) in calls, records
    results = results_of(records, TOOL)
    assert results, records
    got = results[0]
    assert got.untrusted, got  # mcp-server-time is not marked trusted: its result taints
    body = orjson.loads(got.content)
    assert body["timezone"] == ZONE, body
    when = datetime.fromisoformat(body["datetime"])
    assert when.utcoffset() == timedelta(hours=9), body
    assert abs(datetime.now(when.tzinfo) - when) < timedelta(minutes=10), body
    hour12 = when.hour % 12 or 12
    shown = {f"{when.hour:02d}:{when.minute:02d}", f"{hour12}:{when.minute:02d}"}
    # "... is 2026-12-02T10:17:22+09:00" (seen) or "10:17 AM": the hour and minute, as digits
    assert any(re.search(rf"(?<!\d){re.escape(s)}(?!\d)", answer) for s in shown), (answer, body)
    lines = [orjson.loads(x) for x in run.stack.decisions.read_bytes().splitlines()]
    ids = {x["id"] for x in lines if x.get("type") == "request" and x.get("tool") == TOOL}
    assert ids, lines
    decided = [x for x in lines if x.get("type") == "decision" and x["id"] in ids]
    assert decided[0]["mode"] == "allow", decided
    logged = [x for x in lines if x.get("type") == "result" and x["id"] in ids]
    assert logged[0]["untrusted"] is True, logged
