"""The MCP servers of one brokerd: started when first needed, called, restarted after a fault.

One asyncio loop on its own thread runs every server's session (the SDK is async; brokerd's
callers are threads): `list_tools(epoch)` and `call(name, arguments, epoch)` block the caller
until the loop answers, always within the server's own bounds (start timeout, call timeout,
backoff). Every failure is one result the turn goes on with, never an exception:

- a server that cannot start: the error, and its tools are absent from that epoch's list;
- a fault (transport.py's list: malformed, unasked answers, flood, oversize, exit), no answer
  within `call_timeout_ms`, or a result that is not a CallToolResult: the call's result says so
  and the server is stopped; the next call starts it again, not before its backoff
  (`restart_backoff_ms`, doubled after each death in a row up to `restart_backoff_max_ms`,
  reset by a call that succeeds);
- a JSON-RPC error the server answered (an unknown tool, bad arguments): a result, no restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from boxmaker.brokerd.mcp.catalog import (
    EpochTools,
    argument_problem,
    refusal,
    result_text,
    split_name,
    to_response,
)
from boxmaker.brokerd.mcp.config import McpServerConfig
from boxmaker.brokerd.mcp.server import Connection, Server, StartError
from boxmaker.brokerd.quota import WriteQuota
from boxmaker.brokerd.sandbox import SandboxLimits, clear_ambient_capabilities
from boxmaker.proto import ToolSchema
from boxmaker.proto.tool import ToolResponse

T = TypeVar("T")


class McpManager:
    """Every configured server, behind a blocking interface for brokerd's threads."""

    def __init__(
        self,
        servers: dict[str, McpServerConfig],
        workspace: str,
        log: Callable[[str], None],
        runtime_dir: str | None = None,
        write_bytes: int = SandboxLimits().write_bytes,
    ) -> None:
        self.tools = EpochTools()
        self.workspace = workspace
        self.write_bytes = write_bytes  # [broker.shell]'s: one quota for every workspace writer
        self._own_runtime = runtime_dir is None
        self.runtime_dir = runtime_dir or tempfile.mkdtemp(prefix="boxmaker-mcp-")
        if self._own_runtime:
            # the sandbox's uid (nobody, under root) must pass through to its server's own
            # 0700 folder, where the egress socket is: it may not list this one
            os.chmod(self.runtime_dir, 0o711)
        self.servers = {n: Server(c, workspace, self.runtime_dir, log) for n, c in servers.items()}
        for server in self.servers.values():
            server.tools = self.tools
        self.log = log
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="mcp", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """The loop's thread, which spawns every server: its ambient capabilities emptied first
        (sandbox.py says why: bwrap refuses to run with the CAP_CHOWN of the two-user start)."""
        try:
            clear_ambient_capabilities()
        except OSError as exc:
            self.log(f"mcp: {exc}: a server may not start in the sandbox")
        self.loop.run_forever()

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def list_tools(self, epoch: Hashable) -> list[ToolSchema]:
        return self._wait(self.alist_tools(epoch))

    def listed(self, server: str) -> tuple[ToolSchema, ...]:
        """`server`'s latest listing as it is now: nothing started, nothing waited for."""
        return self.tools.latest.get(server, ())

    def latest(self, server: str) -> tuple[ToolSchema, ...]:
        """`server`'s latest listing, listed now if it never was (and is not in its backoff)."""
        return self._wait(self._alatest(server))

    async def _alatest(self, server: str) -> tuple[ToolSchema, ...]:
        srv = self.servers[server]
        if server not in self.tools.latest and srv.not_before <= time.monotonic():
            try:
                await srv.connection()
            except StartError as exc:
                self.log(f"mcp {server}: its tools are left out for now: {exc}")
        return self.tools.latest.get(server, ())

    def call(self, name: str, arguments: Any, epoch: Hashable) -> ToolResponse:
        return self._wait(self.acall(name, arguments, epoch))

    def close(self) -> None:
        if not self.loop.is_running():
            return
        self._wait(self._aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
        if self._own_runtime:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)

    async def _aclose(self) -> None:
        await asyncio.gather(*(s.close() for s in self.servers.values()))

    async def alist_tools(self, epoch: Hashable) -> list[ToolSchema]:
        """The MCP tools of `epoch`: every server started (once) and listed at its first ask."""
        if not self.tools.is_frozen(epoch):
            results = await asyncio.gather(
                *(
                    s.connection()
                    for s in self.servers.values()
                    if s.config.name not in self.tools.latest
                ),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    self.log(f"mcp: a server's tools are left out of epoch {epoch}: {result}")
        return list(self.tools.for_epoch(epoch).values())

    async def acall(self, name: str, arguments: Any, epoch: Hashable) -> ToolResponse:
        parts = split_name(name)
        if parts is None or parts[0] not in self.servers:
            return refusal(f"{name}: no MCP server has this tool")
        server = self.servers[parts[0]]
        schema = (await self._epoch_tools(epoch, server)).get(name)
        if schema is None:
            return refusal(f"{name}: not one of this epoch's tools (the list changes next epoch)")
        if why := argument_problem(schema, arguments):
            return refusal(why)
        try:
            conn = await server.connection()
        except StartError as exc:
            return refusal(f"{name}: the server {server.config.name} could not start: {exc}", True)
        if server.config.workspace != "rw":
            return await self._call(server, conn, parts[1], arguments)
        resp = await self._quota_call(server, conn, parts[1], arguments)
        # what the server wrote keeps no set-id bit (the mount is nosuid inside, not outside)
        note = await asyncio.get_running_loop().run_in_executor(None, server.sandbox.after_call)
        if not note:
            return resp
        return ToolResponse(resp.content + note, resp.class_, resp.untrusted, resp.truncated)

    async def _quota_call(
        self, server: Server, conn: Connection, tool: str, arguments: Any
    ) -> ToolResponse:
        """A call of a server that writes the workspace, under shell's write quota
        ([broker.shell] write_bytes, counted as quota.py counts a shell call's): what the call
        adds is counted as it runs, and past the quota the server is stopped (the call answered
        so) as shell's command is killed."""
        loop = asyncio.get_running_loop()
        quota = await loop.run_in_executor(None, WriteQuota, self.workspace, self.write_bytes)
        called = asyncio.ensure_future(self._call(server, conn, tool, arguments))
        watched = asyncio.ensure_future(self._watch(quota))
        try:
            await asyncio.wait({called, watched}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watched.cancel()
        if not called.done():  # over the quota while it ran
            called.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await called
            return await self._fault(server, conn, self._over(server, quota))
        resp = called.result()
        if await loop.run_in_executor(None, quota.over):  # what it wrote since the last count
            await server.fault(conn, self._over(server, quota))
            return ToolResponse(
                resp.content + f"\n[{self._over(server, quota)}; the server was stopped]",
                resp.class_,
                True,
                resp.truncated,
            )
        return resp

    async def _watch(self, quota: WriteQuota) -> None:
        """Returns once the quota is passed (or cannot be counted); counts at quota's pace."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.0, quota.next_check - time.monotonic()))
            if await loop.run_in_executor(None, quota.over):
                return

    def _over(self, server: Server, quota: WriteQuota) -> str:
        name = server.config.name
        if quota.failed is not None:
            why = quota.failed
            return f"{name}: brokerd cannot count what the call added to the workspace ({why})"
        return (
            f"{name}: the call added {quota.used} bytes to the workspace, over the quota of "
            f"{quota.limit} ([broker.shell] write_bytes)"
        )

    async def _epoch_tools(self, epoch: Hashable, server: Server) -> dict[str, ToolSchema]:
        """The epoch's list (catalog.EpochTools), the called server listed first if it never
        was: a call never waits for another server's start (one that never answers would
        stall it)."""
        if server.config.name not in self.tools.latest:
            with contextlib.suppress(StartError):  # its tools are then not in the list
                await server.connection()
        return self.tools.for_epoch(epoch)

    async def _call(
        self, server: Server, conn: Connection, tool: str, arguments: Any
    ) -> ToolResponse:
        cfg = server.config
        name = f"{cfg.name}.{tool}"
        timeout_ms = cfg.limit("call_timeout_ms")
        assert conn.session is not None
        try:
            with anyio.fail_after(timeout_ms / 1000):
                # send_request, not call_tool: call_tool lists the tools again to find an
                # output schema, and a listing the SDK refuses whole would fail every call.
                result = await conn.session.send_request(
                    types.CallToolRequest(
                        params=types.CallToolRequestParams(name=tool, arguments=arguments)
                    ),
                    types.CallToolResult,
                )
        except TimeoutError:
            return await self._fault(server, conn, f"{name}: no answer within {timeout_ms} ms")
        except MCPError as exc:
            if conn.transport is not None and conn.transport.fault is not None:
                return await self._fault(server, conn, f"{name}: the server {conn.why()}")
            # The server answered with a JSON-RPC error: its words, untrusted like a result.
            return refusal(f"{name}: the server answered an error: {exc}", True)
        except Exception as exc:
            return await self._fault(server, conn, f"{name}: the server {conn.why(exc)}")
        server.deaths = 0
        text = result_text(
            result.model_dump(by_alias=True, mode="json"), cfg.limit("result_cap_bytes")
        )
        return to_response(text, trusted=cfg.trusted)

    async def _fault(self, server: Server, conn: Connection, why: str) -> ToolResponse:
        await server.fault(conn, why)
        # The reason can quote the server's own bytes: untrusted.
        return refusal(f"{why}; the server was stopped and restarts at its next call", True)
