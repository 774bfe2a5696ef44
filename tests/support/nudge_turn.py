"""A turn with `[loop] nudge` driven to its end through the sans-IO loop, for the nudge and
held-call tests (tests/loopd/turn/test_nudge.py, test_stuck.py)."""

from __future__ import annotations

from collections.abc import Iterator

from boxmaker.loopd.llama.types import ChatRequest, Completion, FinishReason
from boxmaker.loopd.tools.registry import CLOCK_SCHEMA, RegisteredTool, Registry
from boxmaker.loopd.turn.limits import LoopLimits
from boxmaker.loopd.turn.loop import Append, Complete, Done, RunTools, TurnLoop
from boxmaker.proto import (
    ResultClass,
    SessionStart,
    Timings,
    ToolCall,
    ToolResponse,
    ToolSchema,
    TurnDone,
    User,
    WireError,
)
from boxmaker.proto.log import LogRecord
from tests.support.turn import Ticker, baseline

T = "2026-11-30T12:00:00.000Z"
START = SessionStart(T, "s1", 0, 1, baseline().hash)
WRITE = ToolSchema(
    "write_file",
    "Writes a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def registry() -> Registry:
    return Registry([RegisteredTool(CLOCK_SCHEMA, True), RegisteredTool(WRITE, True)])


def completion(content: str | None, *calls: ToolCall) -> Completion:
    reason = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    return Completion("id", content, None, calls, reason, Timings(0, 10, 2), 0, False)


def drive(
    replies: list[Completion],
    tools: Iterator[str] | None = None,
    content: str = "what's the port in config.ini?",
    **limits: object,
) -> tuple[list[LogRecord], list[ChatRequest], TurnDone]:
    """The turn run to its end: the records appended, the requests sent, the outcome."""
    appended, requests, outcome = run(replies, tools, content, **limits)
    assert isinstance(outcome, TurnDone), outcome
    return appended, requests, outcome


def run(
    replies: list[Completion],
    tools: Iterator[str] | None = None,
    content: str = "what's the port in config.ini?",
    **limits: object,
) -> tuple[list[LogRecord], list[ChatRequest], TurnDone | WireError]:
    """drive(), whatever the turn ends with."""
    loop = TurnLoop(
        baseline=baseline(), records=[START], content=content,
        thinking=False, registry=registry(), limits=LoopLimits(**limits),  # type: ignore[arg-type]
        clock=Ticker(),
    )  # fmt: skip
    tools = tools or iter(())
    appended: list[LogRecord] = []
    requests: list[ChatRequest] = []
    action = loop.start()
    while not isinstance(action, Done):
        result: object = None
        if isinstance(action, Append):
            appended.append(action.record)
        elif isinstance(action, Complete):
            requests.append(action.request)
            result = replies.pop(0)
        elif isinstance(action, RunTools):
            result = tuple(ToolResponse(next(tools), ResultClass.PUBLIC, False, False)
                           for _ in action.requests)  # fmt: skip
        action = loop.send(result)
    assert not replies, "every scripted completion was asked for"
    return appended, requests, action.outcome


def users(records: list[LogRecord]) -> list[str]:
    return [r.content for r in records if type(r) is User]
