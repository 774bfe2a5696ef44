"""The tool port (M2b brief section 4) and `FakeTools`, M2b's in-process port.

The turn loop knows only `ToolPort.call(request) -> ToolResponse`. M3 implements it over
`broker.sock`; until then `FakeTools` answers two tools in process: `clock` (core; the current
time as RFC 3339) and `echo` (returns its `text` argument). Both answer
`ToolResponse(class public, untrusted false, truncated false)`.

The loop checks every call against the registry and the tool's schema before the port sees it,
so a port may assume the call is one of its tools with valid arguments. FakeTools still raises
ValueError on anything else, and the loop turns any exception into a ToolResult that says so.
FakeTools reads nothing and reaches nothing (the brief's threat model note); its clock is a
parameter, so logs made in tests are repeatable.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

import orjson

from boxmaker.proto import ResultClass, ToolRequest, ToolResponse, format_time


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
