"""One tool-model stack for the package's tool-model tests (test_tool_model.py,
test_tool_model_checks.py: verify-device's checks on this model, and test_tool_model_mcp.py): the
qwen-coder profile with brokerd, a fetch rule naming 127.0.0.1, and mcp-server-time allowed. One
start of the 1.1 GB model for the three modules; every test talks in a session of its own, so
one test's taint (a fetched page, an MCP result) is not another's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from boxmaker.verify.device import Run
from tests.support.agent.tool_model import FETCH_GRANT, MCP_TIME_GRANT, tool_model_run
from tests.support.mcp_servers import python_server


@pytest.fixture(scope="package")
def tool_model() -> Iterator[Run]:
    mcp = {"mcp": python_server("time", "mcp_server_time")}
    with tool_model_run(FETCH_GRANT + "\n" + MCP_TIME_GRANT, mcp) as runner:
        yield runner
