"""The tool port (M2b brief section 4): `BrokerPort` (M3, over broker.sock) and `LoopdClock`.

The turn loop knows only `ToolPort.call(request) -> ToolResponse`. `BrokerPort` sends every call
to brokerd, which holds the authority; brokerd down is a result that says the tools are
unavailable, and the turn goes on. Without a broker socket, `LoopdClock` answers `clock` alone
(the current time as RFC 3339; it reads nothing and reaches nothing), and no other tool is
reachable (loopd says so in its start line). The test tools (`echo`) are tests/support/fake_tools.

The loop checks every call against the registry and the tool's schema before the port sees it,
so a port may assume the call is one of its tools with valid arguments; LoopdClock still raises
ValueError on anything else, and the loop turns any exception into a ToolResult that says so.
`baseline_tools` gives a new session's tools array from `[tools] core`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from boxmaker._framed import FramedClient
from boxmaker.loopd.config import ToolsConfig
from boxmaker.loopd.tools.registry import (
    CLOCK_SCHEMA,
    RECALL_SCHEMA,
    RegisteredTool,
    Registry,
    core_schemas,
    local_registry,
)
from boxmaker.proto import (
    ResultClass,
    ToolRequest,
    ToolResponse,
    ToolSchema,
    clock_text,
    format_time,
)
from boxmaker.proto.broker import BROKER_KINDS
from boxmaker.proto.errors import ProtocolError
from boxmaker.proto.frame import Frame


class ToolPort(Protocol):
    """Runs one tool call. May block (the loop bounds it with `[loop] tool_timeout_ms`) and may
    be called from several threads at once (`[loop] parallel_tools`)."""

    def call(self, request: ToolRequest) -> ToolResponse: ...


def utc_now() -> str:
    """The current time as the log writes it (RFC 3339, UTC, milliseconds)."""
    return format_time(datetime.now(UTC))


def _public(content: str) -> ToolResponse:
    return ToolResponse(content, ResultClass.PUBLIC, untrusted=False, truncated=False)


def clock_now() -> str:
    """clock's answer now (proto.clock_text: the time and its weekday)."""
    return clock_text(datetime.now(UTC))


class LoopdClock:
    """`clock`, answered by loopd itself: the port when no broker socket is set."""

    def __init__(self, clock: Callable[[], str] = clock_now) -> None:
        self._clock = clock

    def call(self, request: ToolRequest) -> ToolResponse:
        """Raises:
        ValueError: any other tool (the loop never sends one: its registry has only clock).
        """
        if request.tool == CLOCK_SCHEMA.name:
            return _public(self._clock())
        raise ValueError(f"no tool {request.tool!r} is reachable without brokerd ([tools] "
                         "broker_socket); loopd answers clock alone")  # fmt: skip


# ---- M3: the port over broker.sock -------------------------------------------------------------

OnApproval = Callable[[str, str, str], None]  # (id, tool, summary): brokerd holds the call
CANCEL_GRACE_S = 2.0  # brokerd's time to answer a cancel (at most a quarter of the timeout)
UNANSWERED_CANCEL = (
    "did not answer loopd's cancel at the tool timeout; whether the call ran is in brokerd's log"
)


def unavailable(why: str) -> ToolResponse:
    """The answer when brokerd cannot be reached: the turn goes on without tools."""
    return ToolResponse(
        f"error: the tools are unavailable: brokerd {why}; the turn goes on without them",
        ResultClass.PUBLIC,
        untrusted=False,
        truncated=False,
    )


def _epoch_0() -> int:
    return 0


class BrokerPort:
    """Every tool call goes to brokerd over `broker.sock`, one connection per call (so parallel
    calls need no lock). loopd holds no authority: brokerd decides, asks the owner, runs the
    tool. While the owner is asked, `on_approval` gets brokerd's `approval_needed` (loopd relays
    it as an event; it cannot answer it)."""

    def __init__(
        self,
        socket_path: str,
        timeout_s: float,
        on_approval: OnApproval,
        session: str = "",
        epoch: Callable[[], int] = _epoch_0,
        call_timeout_s: float | None = None,
    ) -> None:
        """Args:
        socket_path: brokerd's broker.sock.
        timeout_s: the longest wait for one frame (above brokerd's approval_timeout_ms).
        call_timeout_s: `[loop] tool_timeout_ms`. CANCEL_GRACE before it passes, the port shuts
            its writing side (brokerd cancels the call: a held ask denied, a command killed, a
            tool not started) and waits out the grace for brokerd's answer, which says what
            happened; so the loop's timeout never leaves a call running behind its result.
        on_approval: called from the calling thread for each `approval_needed`.
        session: the session's id, sent with each call: brokerd keeps each session's taint
            from its own log.
        epoch: the session's current epoch, read at each call (a compaction moves it mid-turn);
            brokerd logs it for audit, and the taint is the session's whatever it says.
        """
        self._session = session
        self._epoch = epoch
        self._path = socket_path
        self._timeout_s = timeout_s
        self._on_approval = on_approval
        self._call_timeout_s = call_timeout_s
        self._lock = threading.Lock()
        self._calls: set[socket.socket] = set()  # the calls brokerd has not answered yet
        self._withdrawn = False

    def withdraw(self) -> None:
        """The owner stopped the turn (issue 38.1): every call in flight, and any made after,
        is cancelled at brokerd at once, as at the tool timeout (a held ask denied, a command
        killed, a tool not started never starts). Each still gets brokerd's answer, which says
        so, and the turn records it before it stops. Called from any thread."""
        with self._lock:
            self._withdrawn = True
            calls = list(self._calls)
        for sock in calls:
            _shut_writing(sock)

    def _exchange(
        self, kind: str, body: dict[str, Any], cancel_at: float | None = None
    ) -> Iterator[Frame]:
        with FramedClient(self._path, BROKER_KINDS, self._timeout_s) as client:
            client.send(kind, body, True)
            with self._lock:
                self._calls.add(client.sock)
                withdrawn = self._withdrawn
            if withdrawn:
                _shut_writing(client.sock)
            try:
                yield from self._answer(client, cancel_at)
            finally:
                with self._lock:
                    self._calls.discard(client.sock)

    def _answer(self, client: FramedClient, cancel_at: float | None) -> Iterator[Frame]:
        """brokerd's frames for the request sent, up to the final one."""
        cancelled = False
        while True:
            if cancel_at is not None:  # until then, at most one frame's wait
                left = cancel_at - time.monotonic()
                if left <= 0:
                    _shut_writing(client.sock)  # brokerd cancels the call
                    # it answers within the rest: 3/4 of the grace, so the port says
                    # what happened before the loop's own timeout would
                    client.sock.settimeout(self._grace() * 0.75)
                    cancel_at, cancelled = None, True
                else:
                    client.sock.settimeout(min(self._timeout_s, left))
            try:
                got = client.recv()  # a frame cut by a timeout stays in its decoder
            except TimeoutError:
                if cancelled:
                    raise TimeoutError(UNANSWERED_CANCEL) from None
                if cancel_at is None or time.monotonic() < cancel_at:
                    raise
                continue
            if got is None:
                raise ConnectionResetError("brokerd closed the connection mid-call")
            yield got
            if got.final:
                return

    def _grace(self) -> float:
        assert self._call_timeout_s is not None
        return min(CANCEL_GRACE_S, self._call_timeout_s / 4)

    def tools(self) -> tuple[ToolSchema, ...] | None:
        """The tools brokerd grants (find_tool's list); None when brokerd cannot be reached."""
        try:
            for frame in self._exchange("list", {}):
                if frame.kind == "tools":
                    return tuple(ToolSchema.from_json(t) for t in frame.body["tools"])
        except (OSError, ProtocolError, KeyError, TypeError):
            return None
        return None

    def call(self, request: ToolRequest) -> ToolResponse:
        body = {
            "tool": request.tool,
            "arguments": request.arguments,
            "session": self._session,
            "epoch": self._epoch(),
        }
        cancel_at = None
        if self._call_timeout_s is not None:
            cancel_at = time.monotonic() + self._call_timeout_s - self._grace()
        try:
            for frame in self._exchange("call", body, cancel_at):
                if frame.kind == "approval_needed":
                    b = frame.body
                    self._on_approval(str(b["id"]), str(b["tool"]), str(b["summary"]))
                elif frame.kind == "result":
                    return ToolResponse.from_json(frame.body)
                elif frame.kind == "error":
                    return unavailable(f"refused the call ({frame.body.get('message')})")
        except TimeoutError as exc:
            if str(exc) == UNANSWERED_CANCEL:
                return unavailable(UNANSWERED_CANCEL)
            return unavailable(f"did not answer within {self._timeout_s:g} s")
        except FileNotFoundError:
            return unavailable(f"is not running ({self._path} does not exist)")
        except ConnectionRefusedError:
            return unavailable(f"is not running (nobody listens on {self._path})")
        except (OSError, ProtocolError, KeyError) as exc:
            return unavailable(f"failed mid-call ({exc})")
        return unavailable("ended the call without a result")


def _shut_writing(sock: socket.socket) -> None:
    """loopd's end of a call: brokerd sees it and cancels the call (its answer still comes)."""
    with contextlib.suppress(OSError):  # shut already, or brokerd has gone
        sock.shutdown(socket.SHUT_WR)


def broker_registry(tools: Sequence[ToolSchema], core: Sequence[str] = ("clock",)) -> Registry:
    """`clock`, the tools brokerd grants, and loopd's own `recall`; those named in `core`
    (`[tools] core`) are called directly, the others through call_tool."""
    # clock keeps loopd's own schema: it is in every baseline's tools array, fixed for the epoch.
    # recall is loopd's (the session's own record): a brokerd tool of that name is not reachable.
    own = (CLOCK_SCHEMA.name, RECALL_SCHEMA.name)
    rest = [RegisteredTool(t, core=t.name in core) for t in tools if t.name not in own]
    recall = RegisteredTool(RECALL_SCHEMA, core=False)
    clock = RegisteredTool(CLOCK_SCHEMA, core=CLOCK_SCHEMA.name in core)
    return Registry([clock, *rest, recall])


def tools_line(config: ToolsConfig) -> str:
    """What loopd's start line says of the tools."""
    if config.broker_socket is None:
        return ("tools: clock only, answered by loopd (no [tools] broker_socket: no other tool is "
                "reachable)")  # fmt: skip
    return f"tools: brokerd at {config.broker_socket}, core {', '.join(config.core) or 'none'}"


def baseline_tools(config: ToolsConfig) -> tuple[ToolSchema, ...]:
    """A new session's tools array: the `[tools] core` tools (clock is loopd's; any other's
    schema is brokerd's, asked once here, and left out when brokerd does not grant it or cannot
    be reached), then find_tool and call_tool, unless every tool brokerd grants is core."""
    known = [CLOCK_SCHEMA]
    complete = False  # without brokerd's list, the brief's three (M2b section 5)
    if config.broker_socket is not None and set(config.core) - {CLOCK_SCHEMA.name}:
        port = BrokerPort(str(config.broker_socket), config.broker_timeout_ms / 1000, _no_approval)
        granted = port.tools()
        complete = granted is not None  # brokerd down: what it grants is not known
        own = (CLOCK_SCHEMA.name, RECALL_SCHEMA.name)
        known += [t for t in granted or () if t.name not in own]
    return core_schemas(config.core, known, complete)


def _no_approval(_id: str, _tool: str, _summary: str) -> None:
    """`list` asks no approval."""


# The tools brokerd granted at the last turn that could ask, per socket: with brokerd down, the
# model still sees them, and each call answers that the tools are unavailable (not "no such
# tool", which would send it looking elsewhere).
_last_tools: dict[str, tuple[ToolSchema, ...]] = {}


def tool_port(
    config: ToolsConfig,
    on_approval: OnApproval,
    session: str = "",
    epoch: Callable[[], int] = _epoch_0,
    call_timeout_ms: int | None = None,
) -> dict[str, Any]:
    """run_turn's `port` and `registry` for one turn: BrokerPort and the tools brokerd grants now
    when [tools] broker_socket is set, else LoopdClock and clock alone. `epoch` gives the
    session's current epoch at each call."""
    if config.broker_socket is None:
        return {"port": LoopdClock(), "registry": local_registry()}
    path = str(config.broker_socket)
    timeout = None if call_timeout_ms is None else call_timeout_ms / 1000
    port = BrokerPort(path, config.broker_timeout_ms / 1000, on_approval, session, epoch, timeout)
    tools = port.tools()
    if tools is None:
        tools = _last_tools.get(path, (CLOCK_SCHEMA,))
    _last_tools[path] = tools
    return {"port": port, "registry": broker_registry(tools, config.core)}
