"""An MCP server's cost behind brokerd: calls through the manager against the SDK alone.

- call: `get_current_time` of mcp-server-time through McpManager.call (the sandbox, the bounded
  transport, the epoch's schema check, a thread handing the call to the manager's loop) against
  the same server started with the SDK's own stdio_client and called with ClientSession.call_tool
  in one asyncio loop, unsandboxed; p50 and p99 of each, and the ratio of the medians.
- cold start: from nothing to the first tools/list answered, in the sandbox (a new manager's
  list_tools) against the SDK alone (spawn, initialize, list_tools).

`python -m bench.mcp [--calls 200] [--starts 10]`
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.brokerd.mcp.servers import mcp_rig, python_server, sandbox_python, site_packages

from ._timing import line, ratio, times

ARGS = {"timezone": "UTC"}


def _direct_params() -> StdioServerParameters:
    python, _ = sandbox_python()
    return StdioServerParameters(
        command=python, args=["-m", "mcp_server_time"], env={"PYTHONPATH": site_packages()}
    )


async def _direct_calls(n: int) -> list[float]:
    async with (
        stdio_client(_direct_params()) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        await session.call_tool("get_current_time", ARGS)  # warm
        out = []
        for _ in range(n):
            started = time.perf_counter()
            result = await session.call_tool("get_current_time", ARGS)
            out.append(time.perf_counter() - started)
            assert not result.is_error
        return out


async def _direct_start() -> float:
    started = time.perf_counter()
    async with (
        stdio_client(_direct_params()) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=10)
    args = parser.parse_args(argv)
    print("bench mcp: mcp-server-time through brokerd's manager (sandboxed) vs the SDK alone")
    with mcp_rig() as rig:
        manager = rig.manager(python_server("time", "mcp_server_time"))
        manager.call("time.get_current_time", ARGS, 0)  # warm: started, listed, one call

        def through() -> Any:
            result = manager.call("time.get_current_time", ARGS, 0)
            assert "UTC" in result.content, result.content

        brokered = times(through, args.calls)
        direct = asyncio.run(_direct_calls(args.calls))
        line("call through the manager", brokered)
        line("call with the SDK alone", direct)
        ratio("manager / SDK", brokered, direct)

        sandboxed = []
        for _ in range(args.starts):
            started = time.perf_counter()
            cold = rig.manager(python_server("time", "mcp_server_time"))
            assert cold.list_tools(0)
            sandboxed.append(time.perf_counter() - started)
            cold.close()
            rig.managers.remove(cold)
        alone = [asyncio.run(_direct_start()) for _ in range(args.starts)]
        line("cold start in the sandbox", sandboxed)
        line("cold start with the SDK alone", alone)
        ratio("sandbox / SDK", sandboxed, alone)


if __name__ == "__main__":
    main()
