"""The tool model's stack for a test module (tests/e2e/test_tool_model*.py): the qwen-coder
profile's real llama-server (Qwen2.5-Coder-1.5B, fetched once per machine by
scripts/fetch_tool_model.sh) under supervisord with brokerd, inferproxy and loopd, as
verify-device starts it (boxmaker/verify/stack.py); and the helpers that read a turn's records.
"""

from __future__ import annotations

import contextlib
import io
import os
import pwd
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from boxmaker._toml import toml_dumps
from boxmaker.proto import ToolResult
from boxmaker.verify import device
from boxmaker.verify.checks import called_tool, paired_calls, target
from boxmaker.verify.device import Run
from boxmaker.verify.profile import load_profile
from boxmaker.verify.stack import Stack
from tests.support.llama import ensure_tool_model

MCP_TIME_TOOL = "time.get_current_time"  # mcp-server-time's, as brokerd lists it
# The tests' fetch rule: an IP address named in a rule is the only way fetch reaches loopback.
FETCH_GRANT = '[[grant]]\ntool = "fetch"\nmode = "ask"\nhosts = ["127.0.0.1"]\n'
# An MCP tool with no rule is asked about: allowed here, so the MCP test needs no approval.
MCP_TIME_GRANT = f'[[grant]]\ntool = "{MCP_TIME_TOOL}"\nmode = "allow"\n'


class _Stack(Stack):
    """The profile's stack, with tables of the test's own merged into brokerd's config (an
    `[mcp.<name>]` server)."""

    def __init__(self, tables: dict[str, Any]) -> None:
        super().__init__(None, None, None, load_profile("qwen-coder"))
        self.brokerd_tables = tables

    def _brokerd(self) -> Path:
        path = super()._brokerd()
        if self.brokerd_tables:
            table = tomllib.loads(path.read_text())
            for key, value in self.brokerd_tables.items():
                table.setdefault(key, {}).update(value)
            path.write_text(toml_dumps(table))
        return path


TOOL_TURN_S = 900.0  # one tool-model turn's bound in the tests (tests/support/agent/run.py's too)


@contextlib.contextmanager
def tool_model_run(extra_grants: str = "", brokerd: dict[str, Any] | None = None) -> Iterator[Run]:
    """One stack on the tool model, started, loopd up: the Run that drives `bxctl chat`.
    `extra_grants`: rules after the profile's; `brokerd`: tables merged into its config."""
    ensure_tool_model()
    stack = _Stack(brokerd or {})
    stack.extra_grants = extra_grants
    if os.geteuid() == 0:
        # As root brokerd's sandbox runs shell as nobody, who must reach and write the workspace
        # (tests/support/brokerd/rig.sandbox_workspace); else brokerd starts with shell off.
        os.chmod(stack.run, 0o755)
        stack.workspace.mkdir()
        nobody = pwd.getpwnam("nobody")
        os.chown(stack.workspace, nobody.pw_uid, nobody.pw_gid)
    runner = Run(stack, io.StringIO())
    # verify-device's turn bound, as `--turn-bound` sets it: a turn of several completions may
    # take up to loopd's liveness (180 s) each, past 300 s on 2 shared cores (3 turns cut at
    # load 9 in a clean-clone run)
    bounds = device.TURN_BOUND, device.CLOCK_SLACK_S
    device.TURN_BOUND, device.CLOCK_SLACK_S = TOOL_TURN_S, 2 * TOOL_TURN_S
    try:
        stack.start()
        stack.wait_loopd()
        yield runner
    finally:
        device.TURN_BOUND, device.CLOCK_SLACK_S = bounds
        stack.stop()


def turn(run: Run, session: str, prompt: str, approve: str = "") -> tuple[str, list[Any]]:
    """One turn in a fresh session: (the answer, "" when the turn ended without one, e.g. by
    the repeat rule after the work was done; the session's records)."""
    done, _ = run.say(prompt, session, approve)
    return str((done or {}).get("content") or ""), run.records(session)


def results_of(records: list[Any], tool: str) -> list[ToolResult]:
    """The ToolResults of the calls of `tool` (directly or through call_tool), in order."""
    return [
        r
        for c, r in paired_calls(records)
        if r is not None and target(called_tool(c.name, c.arguments)) == tool
    ]


def approvals(run: Run, tool: str, session: str) -> list[str]:
    """The owner's answers brokerd logged for calls of `tool` in `session` (the stack is shared:
    another test's session may have asked about the same tool)."""
    lines = [orjson.loads(x) for x in run.stack.decisions.read_bytes().splitlines()]
    ids = {
        x["id"]
        for x in lines
        if x.get("type") == "request" and x.get("tool") == tool and x.get("session") == session
    }
    return [x["answer"] for x in lines if x.get("type") == "approval" and x["id"] in ids]
