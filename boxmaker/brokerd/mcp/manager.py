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
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from boxmaker.brokerd.mcp.catalog import (
    EpochTools,
    argument_problem,
    check_tool,
    refusal,
    result_text,
    split_name,
    to_response,
)
from boxmaker.brokerd.mcp.config import McpServerConfig
from boxmaker.brokerd.mcp.egress import EgressProxy
from boxmaker.brokerd.mcp.hosts import EgressPolicy
from boxmaker.brokerd.mcp.launch import LaunchError, sandbox_for, server_argv
from boxmaker.brokerd.mcp.transport import BoundedStdio
from boxmaker.proto import ToolSchema
from boxmaker.proto.tool import ToolResponse

T = TypeVar("T")
MAX_LIST_PAGES = 20
CLIENT_INFO = types.Implementation(name="boxmaker-brokerd", version="1")


class StartError(Exception):
    """The server could not be started; the message says why."""


class Connection:
    """One run of one server: its sandboxed process, its egress proxy, its SDK session."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: BoundedStdio | None = None
        self.proxy: EgressProxy | None = None
        self.session: ClientSession | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._proxy_dir: str | None = None

    async def open(self) -> None:
        cfg, srv = self.server.config, self.server
        egress_path = None
        if cfg.hosts:
            self._proxy_dir = tempfile.mkdtemp(prefix=f"mcp-{cfg.name}-", dir=srv.runtime_dir)
            uid = srv.sandbox.run_as[0] if srv.sandbox.run_as is not None else None
            if uid is not None:
                os.chown(self._proxy_dir, uid, -1)
            egress_path = os.path.join(self._proxy_dir, "egress.sock")
            self.proxy = EgressProxy(cfg.name, EgressPolicy(cfg.hosts), egress_path, srv.log)
            await self.proxy.start(uid)
        try:
            argv = server_argv(cfg, srv.sandbox, egress_path)
        except LaunchError as exc:
            raise StartError(str(exc)) from None
        self.transport = BoundedStdio(
            cfg.name,
            argv,
            run_as=srv.sandbox.run_as,
            message_cap=cfg.limit("message_cap_bytes"),
            flood_messages=cfg.limit("flood_messages"),
            stderr_bytes=cfg.limit("stderr_bytes"),
            log=srv.log,
        )
        try:
            await self.transport.start()
        except OSError as exc:
            raise StartError(f"the sandbox could not start: {exc}") from None
        self._runner = asyncio.get_running_loop().create_task(self._run())
        try:
            with anyio.fail_after(cfg.limit("start_timeout_ms") / 1000):
                await asyncio.shield(self._ready)
        except TimeoutError:
            raise StartError(
                f"no answer to initialize within {cfg.limit('start_timeout_ms')} ms"
            ) from None
        except Exception as exc:
            raise StartError(self.why(exc)) from None

    async def _run(self) -> None:
        assert self.transport is not None
        try:
            async with ClientSession(
                self.transport.read_stream,
                self.transport.write_stream,
                message_handler=self._on_message,
                client_info=CLIENT_INFO,
            ) as session:
                await session.initialize()
                self.session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            asyncio.get_running_loop().create_task(self.server.relist(self))

    def why(self, exc: BaseException | None = None) -> str:
        """What went wrong, the transport's fault first (it is the cause of the rest)."""
        if self.transport is not None and self.transport.fault is not None:
            tail = " | ".join(self.transport.stderr_tail)
            return self.transport.fault + (f" (its stderr ended: {tail})" if tail else "")
        return f"{type(exc).__name__}: {exc}" if exc is not None else "stopped"

    @property
    def alive(self) -> bool:
        return (
            self.session is not None
            and self.transport is not None
            and self.transport.fault is None
            and not self._stop.is_set()
        )

    async def close(self) -> None:
        self._stop.set()
        if self.transport is not None:
            self.transport.kill()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner, 5.0)
        if self.transport is not None:
            await self.transport.close()
        if self.proxy is not None:
            await self.proxy.close()
        if self._proxy_dir is not None:
            shutil.rmtree(self._proxy_dir, ignore_errors=True)


class Server:
    """One configured server across its runs: the backoff, the listing, the current run."""

    def __init__(
        self, config: McpServerConfig, workspace: str, runtime_dir: str, log: Callable[[str], None]
    ) -> None:
        self.config = config
        self.sandbox = sandbox_for(config, workspace)
        self.runtime_dir = runtime_dir
        self._log = log
        self.conn: Connection | None = None
        self.last: Connection | None = None  # the latest run, alive or not (the tests read it)
        self.tools: EpochTools | None = None  # set by the manager
        self.deaths = 0  # in a row
        self.not_before = 0.0
        self.starts = 0
        self._lock = asyncio.Lock()

    def log(self, line: str) -> None:
        self._log(f"mcp {self.config.name}: {line}")

    async def connection(self) -> Connection:
        async with self._lock:
            if self.conn is not None and self.conn.alive:
                return self.conn
            if self.conn is not None:
                await self._stop(self.conn, died=True)
            wait = self.not_before - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            conn = Connection(self)
            self.last = conn
            self.starts += 1
            try:
                await conn.open()
                await self._list(conn)
            except Exception as exc:
                await self._stop(conn, died=True)
                raise StartError(
                    str(exc) if isinstance(exc, StartError) else conn.why(exc)
                ) from None
            except BaseException:  # cancelled: no process left behind, no death counted
                await asyncio.shield(conn.close())
                raise
            self.conn = conn
            return conn

    async def _list(self, conn: Connection) -> None:
        """tools/list through the SDK, each tool judged on the listing as the server sent it (the
        SDK refuses a listing whole when one tool is malformed; brokerd leaves out that one)."""
        assert conn.session is not None
        assert conn.transport is not None
        assert self.tools is not None
        raw_tools: list[Any] = []
        cursor: str | None = None
        with anyio.fail_after(self.config.limit("start_timeout_ms") / 1000):
            for _ in range(MAX_LIST_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                with contextlib.suppress(ValidationError):
                    await conn.session.list_tools(params=params)
                page = conn.transport.raw_results.pop("tools/list", {})
                tools = page.get("tools")
                raw_tools += tools if isinstance(tools, list) else []
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
        kept = []
        for tool in raw_tools:
            checked = check_tool(self.config.name, tool if isinstance(tool, dict) else {})
            if isinstance(checked, str):
                self.log(checked)
            else:
                kept.append(checked)
        self.tools.record(self.config.name, kept)

    async def relist(self, conn: Connection) -> None:
        """After notifications/tools/list_changed: the new list, for the next epoch."""
        if conn is not self.conn or not conn.alive:
            return
        try:
            await self._list(conn)
            self.log("its tools changed; the new list holds from the next epoch")
        except Exception as exc:
            self.log(f"listing its changed tools failed: {conn.why(exc)}")

    async def fault(self, conn: Connection, why: str) -> None:
        self.log(f"{why}; restarting it at its next call")
        async with self._lock:
            await self._stop(conn, died=True)

    async def _stop(self, conn: Connection, *, died: bool) -> None:
        if self.conn is conn:
            self.conn = None
        await conn.close()
        if died:
            self.deaths += 1
            base = self.config.limit("restart_backoff_ms")
            backoff = min(
                base * 2 ** (self.deaths - 1), self.config.limit("restart_backoff_max_ms")
            )
            self.not_before = time.monotonic() + backoff / 1000

    async def close(self) -> None:
        async with self._lock:
            if self.conn is not None:
                await self._stop(self.conn, died=False)


class McpManager:
    """Every configured server, behind a blocking interface for brokerd's threads."""

    def __init__(
        self,
        servers: dict[str, McpServerConfig],
        workspace: str,
        log: Callable[[str], None],
        runtime_dir: str | None = None,
    ) -> None:
        self.tools = EpochTools()
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
        self._thread = threading.Thread(target=self.loop.run_forever, name="mcp", daemon=True)
        self._thread.start()

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def list_tools(self, epoch: int) -> list[ToolSchema]:
        return self._wait(self.alist_tools(epoch))

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

    def call(self, name: str, arguments: Any, epoch: int) -> ToolResponse:
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

    async def alist_tools(self, epoch: int) -> list[ToolSchema]:
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

    async def acall(self, name: str, arguments: Any, epoch: int) -> ToolResponse:
        parts = split_name(name)
        if parts is None or parts[0] not in self.servers:
            return refusal(f"{name}: no MCP server has this tool")
        server = self.servers[parts[0]]
        schema = (await self._epoch_tools(epoch)).get(name)
        if schema is None:
            return refusal(f"{name}: not one of this epoch's tools (the list changes next epoch)")
        if why := argument_problem(schema, arguments):
            return refusal(why)
        try:
            conn = await server.connection()
        except StartError as exc:
            return refusal(f"{name}: the server {server.config.name} could not start: {exc}", True)
        return await self._call(server, conn, parts[1], arguments)

    async def _epoch_tools(self, epoch: int) -> dict[str, ToolSchema]:
        await self.alist_tools(epoch)
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
