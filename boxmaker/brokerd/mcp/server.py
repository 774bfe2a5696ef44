"""One configured MCP server across its runs: each run (Connection) is its sandboxed process,
its egress proxy and its SDK session; the Server holds the backoff and the listing.

A run starts with spawn, `initialize` and `tools/list` within `start_timeout_ms`; a listing is
judged tool by tool (catalog.check_tool) on the result as the server sent it, since the SDK
refuses a listing whole when one tool is malformed; a listing over MAX_TOOLS tools or
MAX_LISTING_BYTES is refused whole (the server has no tools, one log line; the others are listed
as usual). `notifications/tools/list_changed` lists it again, at most once per RELIST_S. A
stopped run is never reused: the next call starts a new one, after the backoff
(`restart_backoff_ms`, doubled per death in a row up to `restart_backoff_max_ms`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
import orjson
from mcp import ClientSession
from pydantic import ValidationError

from boxmaker.brokerd.mcp.catalog import EpochTools, check_tool
from boxmaker.brokerd.mcp.config import McpServerConfig
from boxmaker.brokerd.mcp.egress import EgressProxy
from boxmaker.brokerd.mcp.hosts import EgressPolicy
from boxmaker.brokerd.mcp.launch import LaunchError, sandbox_for, server_argv
from boxmaker.brokerd.mcp.transport import BoundedStdio

MAX_LIST_PAGES = 20
MAX_TOOLS = 256  # tools in one server's listing; past it the server's listing is refused
MAX_LISTING_BYTES = 256 << 10  # its tools' JSON as listed, all pages together
RELIST_S = 1.0  # at most one listing per this, however often tools/list_changed comes
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
            memory_cap=cfg.limit("memory_bytes"),
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
            self.server.relist_soon(self)

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
        self._relist: asyncio.Task[None] | None = None
        self._relist_again = False
        self._relisted = 0.0

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
        why = listing_problem(raw_tools)
        if why is not None:
            self.log(f"its listing is refused, none of its tools is listed: {why}")
            self.tools.record(self.config.name, [])
            return
        kept = []
        for tool in raw_tools:
            checked = check_tool(self.config.name, tool if isinstance(tool, dict) else {})
            if isinstance(checked, str):
                self.log(checked)
            else:
                kept.append(checked)
        self.tools.record(self.config.name, kept)

    def relist_soon(self, conn: Connection) -> None:
        """A listing after notifications/tools/list_changed: at most one at a time and one
        per RELIST_S; the notifications in between make one more listing, not one each."""
        if self._relist is not None and not self._relist.done():
            self._relist_again = True
            return
        self._relist = asyncio.get_running_loop().create_task(self._relist_paced(conn))

    async def _relist_paced(self, conn: Connection) -> None:
        while True:
            self._relist_again = False
            await asyncio.sleep(max(0.0, self._relisted + RELIST_S - time.monotonic()))
            self._relisted = time.monotonic()
            await self.relist(conn)
            if not self._relist_again:
                return

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


def listing_problem(tools: list[Any]) -> str | None:
    """Why a server's listing is refused whole: over MAX_TOOLS tools, or over MAX_LISTING_BYTES
    of JSON (a listing brokerd would carry to loopd in one frame, and decide on)."""
    if len(tools) > MAX_TOOLS:
        return f"{len(tools)} tools, over {MAX_TOOLS}"
    size = 0
    for tool in tools:
        try:
            size += len(orjson.dumps(tool))
        except (TypeError, orjson.JSONEncodeError):
            continue  # judged (and left out) on its own
        if size > MAX_LISTING_BYTES:
            return f"over {MAX_LISTING_BYTES} bytes of tools"
    return None
