"""The tool port (M2b brief section 4): `BrokerPort` (M3, over broker.sock) and `FakeTools`.

The turn loop knows only `ToolPort.call(request) -> ToolResponse`. `BrokerPort` sends every call
to brokerd, which holds the authority; brokerd down is a result that says the tools are
unavailable, and the turn goes on. For tests, `FakeTools` answers two tools in process: `clock`
(core; the current time as RFC 3339) and `echo` (returns its `text` argument). Both answer
`ToolResponse(class public, untrusted false, truncated false)`.

The loop checks every call against the registry and the tool's schema before the port sees it,
so a port may assume the call is one of its tools with valid arguments. FakeTools still raises
ValueError on anything else, and the loop turns any exception into a ToolResult that says so.
FakeTools reads nothing and reaches nothing (the brief's threat model note); its clock is a
parameter, so logs made in tests are repeatable.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from boxmaker._framed import FramedClient
from boxmaker.loopd.config import ToolsConfig
from boxmaker.loopd.tools.registry import CLOCK_SCHEMA, RECALL_SCHEMA, RegisteredTool, Registry
from boxmaker.proto import ResultClass, ToolRequest, ToolResponse, ToolSchema, format_time
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


class FakeTools:
    """`clock` and `echo`, in process. Thread-safe: it holds no state but the clock."""

    TOOLS = ("clock", "echo")

    def __init__(self, clock: Callable[[], str] = utc_now) -> None:
        """Args:
        clock: returns the time `clock` answers, as RFC 3339 text.
        """
        self._clock = clock

    def call(self, request: ToolRequest) -> ToolResponse:
        """Raises:
        ValueError: an unknown tool or arguments it cannot use (the loop never sends these).
        """
        if request.tool == "clock":
            return _public(self._clock())
        if request.tool == "echo":
            args = orjson.loads(request.arguments)
            if not isinstance(args, dict) or not isinstance(args.get("text"), str):
                raise ValueError('echo takes {"text": <string>}')
            return _public(args["text"])
        raise ValueError(f"FakeTools has no tool {request.tool!r} (it has {', '.join(self.TOOLS)})")


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

    def _exchange(
        self, kind: str, body: dict[str, Any], cancel_at: float | None = None
    ) -> Iterator[Frame]:
        with FramedClient(self._path, BROKER_KINDS, self._timeout_s) as client:
            client.send(kind, body, True)
            cancelled = False
            while True:
                if cancel_at is not None:  # until then, at most one frame's wait
                    left = cancel_at - time.monotonic()
                    if left <= 0:
                        client.sock.shutdown(socket.SHUT_WR)  # brokerd cancels the call
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


def broker_registry(tools: Sequence[ToolSchema]) -> Registry:
    """`clock` (core), the tools brokerd grants, and loopd's own `recall`, reached through
    call_tool."""
    # clock keeps loopd's own schema: it is in every baseline's tools array, fixed for the epoch.
    # recall is loopd's (the session's own record): a brokerd tool of that name is not reachable.
    own = (CLOCK_SCHEMA.name, RECALL_SCHEMA.name)
    rest = [RegisteredTool(t, core=False) for t in tools if t.name not in own]
    recall = RegisteredTool(RECALL_SCHEMA, core=False)
    return Registry([RegisteredTool(CLOCK_SCHEMA, core=True), *rest, recall])


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
    when [tools] broker_socket is set, else FakeTools and M2b's registry. `epoch` gives the
    session's current epoch at each call."""
    if config.broker_socket is None:
        return {"port": FakeTools(), "registry": None}
    path = str(config.broker_socket)
    timeout = None if call_timeout_ms is None else call_timeout_ms / 1000
    port = BrokerPort(path, config.broker_timeout_ms / 1000, on_approval, session, epoch, timeout)
    tools = port.tools()
    if tools is None:
        tools = _last_tools.get(path, (CLOCK_SCHEMA,))
    _last_tools[path] = tools
    return {"port": port, "registry": broker_registry(tools)}
