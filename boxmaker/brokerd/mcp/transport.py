"""The stdio transport between the SDK's ClientSession and one sandboxed server, with bounds.

The SDK's own `stdio_client` reads a line of any length and passes on any answer; a hostile
server could fill brokerd's memory or answer requests it was never sent. This one frames the
same newline-delimited JSON-RPC (parsed and serialised by the SDK's own types) and watches it:
a line over `message_cap_bytes`, a line that is not JSON-RPC, a response to an id brokerd did
not send (or answered already), more than `flood_messages` unasked messages (notifications,
pings, requests) since brokerd's last call, less those a minute drains (FLOOD_WINDOW_S), or the
server's exit, or the server's processes holding more than `memory_bytes` of resident memory
together (memory.py; read every WATCH_S, so the excess lasts at most that long, while RLIMIT_AS
still bounds each process): each is a fault. On a fault the process group is killed (bwrap's:
its pid namespace's init dies with it, and every process of the sandbox with that) and the read
stream closed, so every pending request ends at once; `fault` says why.

The server's stderr goes to brokerd's log line by line, `stderr_bytes` per run, then dropped.
What the server asks of brokerd (sampling, roots, elicitation) is refused by the SDK's defaults,
which also advertise none of those capabilities; the request is logged here.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from boxmaker.brokerd.mcp.memory import parse_stat, tree_bytes
from boxmaker.brokerd.tools.kind import visible

STDERR_LINE = 1000  # characters of one stderr line in the log
FLOOD_WINDOW_S = 60.0  # unasked messages refill at flood_messages per this many seconds
REFUSED_ASKS = frozenset({"sampling/createMessage", "roots/list", "elicitation/create"})
WATCH_S = 0.5  # how often a server's memory as a whole is read
PAGE = os.sysconf("SC_PAGE_SIZE")


class BoundedStdio:
    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        run_as: tuple[int, int] | None,
        message_cap: int,
        flood_messages: int,
        stderr_bytes: int,
        log: Callable[[str], None],
        memory_cap: int | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.run_as = run_as
        self.message_cap = message_cap
        self.flood_messages = flood_messages
        self.stderr_bytes = stderr_bytes
        self.memory_cap = memory_cap
        self.log = log
        self.fault: str | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=3)
        self.asked: list[str] = []  # methods the server asked of brokerd (all refused)
        self.proc: asyncio.subprocess.Process | None = None
        self._pending: dict[Any, str] = {}  # our requests not yet answered: id -> method
        self.raw_results: dict[str, dict[str, Any]] = {}  # the latest result of each method
        self._unasked = 0.0  # a bucket: +1 per unasked message, drained over FLOOD_WINDOW_S
        self._unasked_at = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self._to_session: MemoryObjectSendStream[SessionMessage | Exception]
        self.read_stream: MemoryObjectReceiveStream[SessionMessage | Exception]
        self.write_stream: MemoryObjectSendStream[SessionMessage]
        self._from_session: MemoryObjectReceiveStream[SessionMessage]
        self._to_session, self.read_stream = anyio.create_memory_object_stream(64)
        self.write_stream, self._from_session = anyio.create_memory_object_stream(64)

    async def start(self) -> None:
        """Spawns the server (OSError when it cannot be) and starts the pipe tasks."""
        user, group = self.run_as if self.run_as is not None else (None, None)
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={},
            cwd="/",
            start_new_session=True,  # bwrap leads its own group: one killpg ends it
            limit=self.message_cap + 1,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )
        loop = asyncio.get_running_loop()
        for coro in (self._read(), self._write(), self._stderr()):
            self._tasks.append(loop.create_task(coro))
        if self.memory_cap is not None:
            self._tasks.append(loop.create_task(self._watch(self.memory_cap)))

    def _broke(self, why: str) -> None:
        if self.fault is None:
            self.fault = why
            self.log(f"{why}; stopping it")
        self.kill()
        self._to_session.close()  # the session's pending requests end now

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        self.kill()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.proc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.proc.wait(), 5.0)
            # asyncio keeps the pipes' transport open while anything could still read them;
            # nothing public closes it (the SDK's stdio_client walks to it the same way).
            transport = getattr(self.proc, "_transport", None)
            if transport is not None:
                transport.close()
        self._to_session.close()
        self.write_stream.close()

    async def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                return self._broke(f"sent a message over the cap of {self.message_cap} bytes")
            except asyncio.IncompleteReadError:
                code = await self.proc.wait()
                return self._broke(f"exited (status {code})")
            if not line.strip():
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except (ValidationError, ValueError):
                return self._broke(f"sent a line that is not JSON-RPC: {line[:120]!r}")
            why = self._judge(message)
            if why is not None:
                return self._broke(why)
            try:
                await self._to_session.send(SessionMessage(message))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return None

    def _judge(self, message: types.JSONRPCMessage) -> str | None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            if message.id not in self._pending:
                return f"answered a request it was not sent (id {message.id!r})"
            method = self._pending.pop(message.id)
            if isinstance(message, types.JSONRPCResponse):
                # As sent: the SDK validates a listing whole, brokerd judges it tool by tool.
                self.raw_results[method] = message.result
        else:
            # Counted whatever brokerd answers (the SDK answers a ping by itself): only a call
            # of brokerd's own empties the bucket, and time drains it at flood_messages per
            # FLOOD_WINDOW_S, so a server that pings now and then is never stopped.
            now = time.monotonic()
            drained = (now - self._unasked_at) * self.flood_messages / FLOOD_WINDOW_S
            self._unasked, self._unasked_at = max(0.0, self._unasked - drained) + 1, now
            if self._unasked > self.flood_messages:
                return f"sent over {self.flood_messages} messages nobody asked for (a flood)"
            if isinstance(message, types.JSONRPCRequest) and message.method in REFUSED_ASKS:
                self.asked.append(message.method)
                self.log(f"asked for {message.method}: refused (brokerd gives servers none)")
        return None

    async def _watch(self, cap: int) -> None:
        """Stops the server once its processes hold more than `cap` resident bytes together."""
        assert self.proc is not None
        while self.proc.returncode is None:
            await asyncio.sleep(WATCH_S)
            try:
                rows = await asyncio.to_thread(_processes)
                held, count = tree_bytes(self.proc.pid, rows, PAGE)
            except Exception as exc:  # unwatched is unbounded: fail closed
                return self._broke(f"its memory could not be read ({type(exc).__name__}: {exc})")
            if held > cap:
                return self._broke(
                    f"its {count} processes held {held >> 20} MiB together, over its "
                    f"memory_bytes of {cap >> 20} MiB"
                )
        return None

    async def _write(self) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        stdin = self.proc.stdin
        try:
            async for item in self._from_session:
                message = item.message
                if isinstance(message, types.JSONRPCRequest):
                    self._pending[message.id] = message.method
                    if message.method == "tools/call":  # brokerd's own ask, not an answer
                        self._unasked = 0.0
                data = message.model_dump_json(by_alias=True, exclude_unset=True)
                stdin.write(data.encode() + b"\n")
                await stdin.drain()
        except (OSError, anyio.ClosedResourceError, anyio.EndOfStream):
            self._broke("stopped reading its input")

    async def _stderr(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        stderr = self.proc.stderr
        left = self.stderr_bytes
        buffered = b""
        while chunk := await stderr.read(65536):
            if left <= 0:
                continue  # drained, so a chatty server never blocks on a full pipe
            chunk = chunk[:left]
            left -= len(chunk)
            *lines, buffered = (buffered + chunk).split(b"\n")
            for line in lines:
                self._stderr_line(line)
            if left <= 0:
                self.log(f"stderr: past {self.stderr_bytes} bytes; the rest of this run dropped")
        if buffered and left > 0:
            self._stderr_line(buffered)

    def _stderr_line(self, line: bytes) -> None:
        # escaped: no ESC, CR or other control reaches brokerd's log (or a terminal showing it)
        text = visible(line.decode("utf-8", "replace")[:STDERR_LINE])
        self.stderr_tail.append(text[:200])
        self.log(f"stderr: {text}")


def _processes() -> list[tuple[int, int, int]]:
    """(pid, parent pid, resident pages) of every process now; one that ends meanwhile is left
    out (its memory is freed)."""
    rows = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                got = parse_stat(f.read())
        except OSError:
            continue
        if got is not None:
            rows.append((int(entry), *got))
    return rows
