"""The in-process test tools: `FakeTools` answers `clock` (core; the time as RFC 3339) and `echo`
(returns its `text` argument), and `fake_registry` lists them with loopd's `recall`. Test code
only (issue 28): loopd itself offers `clock` alone without brokerd (loopd.tools.port.LoopdClock).

Both answer `ToolResponse(class public, untrusted false, truncated false)`. FakeTools raises
ValueError on anything else (the loop turns it into a ToolResult that says so); its clock is a
parameter, so logs made in tests are repeatable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import orjson

from boxmaker.loopd.tools.port import utc_now
from boxmaker.loopd.tools.registry import CLOCK_SCHEMA, RECALL_SCHEMA, RegisteredTool, Registry
from boxmaker.proto import ResultClass, ToolRequest, ToolResponse, ToolSchema

ECHO_SCHEMA: Final = ToolSchema(
    "echo",
    "Echoes text back unchanged: returns its text argument.",
    {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to return."}},
        "required": ["text"],
    },
)


def fake_registry() -> Registry:
    """`clock` (core) and `echo`, the tools FakeTools answers, and `recall` (loopd's own)."""
    return Registry(
        [
            RegisteredTool(CLOCK_SCHEMA, core=True),
            RegisteredTool(ECHO_SCHEMA, False),
            RegisteredTool(RECALL_SCHEMA, False),
        ]
    )


def _public(content: str) -> ToolResponse:
    return ToolResponse(content, ResultClass.PUBLIC, untrusted=False, truncated=False)


class FakeTools:
    """`clock` and `echo`, in process. Thread-safe: it holds no state but the clock."""

    TOOLS = ("clock", "echo")

    def __init__(self, clock: Callable[[], str] = utc_now) -> None:
        self._clock = clock

    def call(self, request: ToolRequest) -> ToolResponse:
        if request.tool == "clock":
            return _public(self._clock())
        if request.tool == "echo":
            args = orjson.loads(request.arguments)
            if not isinstance(args, dict) or not isinstance(args.get("text"), str):
                raise ValueError('echo takes {"text": <string>}')
            return _public(args["text"])
        raise ValueError(f"FakeTools has no tool {request.tool!r} (it has {', '.join(self.TOOLS)})")
