"""The sans-IO core on its own: the actions of a turn in order, and its contract with a runner."""

from __future__ import annotations

import pytest

from boxmaker.loopd.llama.errors import HttpStatus, Stalled
from boxmaker.loopd.llama.types import Completion, FinishReason
from boxmaker.loopd.turn.limits import LoopLimits
from boxmaker.loopd.turn.loop import (
    Append,
    Complete,
    Done,
    Emit,
    RunTools,
    TurnLoop,
    next_call_number,
    unanswered_calls,
)
from boxmaker.proto import (
    Assistant,
    ErrorCode,
    ResultClass,
    SessionStart,
    Timings,
    ToolCall,
    ToolCallStartedEvent,
    ToolRequest,
    ToolResponse,
    ToolResult,
    ToolResultEvent,
    TurnDone,
    TurnUsage,
    User,
    WireError,
)
from boxmaker.proto.log import LogRecord
from tests.support.fake_tools import fake_registry
from tests.support.turn import Ticker, baseline

T = "2026-11-30T12:00:00.000Z"
START = SessionStart(T, "s1", 0, 1, baseline().hash)


def core(records: list[LogRecord] | None = None, **limits: object) -> TurnLoop:
    return TurnLoop(
        baseline=baseline(),
        records=records or [START],
        content="Hi",
        thinking=False,
        registry=fake_registry(),
        limits=LoopLimits(**limits),  # type: ignore[arg-type]
        clock=Ticker(),
    )


def done(content: str | None, *tool_calls: ToolCall) -> Completion:
    reason = FinishReason.TOOL_CALLS if tool_calls else FinishReason.STOP
    return Completion("id", content, None, tool_calls, reason, Timings(0, 10, 2), 0, False)


def test_a_plain_turn_action_by_action() -> None:
    loop = core()
    a = loop.start()
    assert isinstance(a, Append)
    assert isinstance(a.record, User)
    a = loop.send(None)
    assert isinstance(a, Complete)
    assert a.request.slot == 1  # the session's slot, from session_start
    assert a.request.thinking is False
    assert a.request.tools == baseline().tools
    assert [m.to_json() for m in a.request.messages] == [
        {"role": "system", "content": baseline().system},
        {"role": "user", "content": "Hi"},
    ]
    a = loop.send(done("Hello"))
    assert isinstance(a, Append)
    assert isinstance(a.record, Assistant)
    a = loop.send(None)
    assert isinstance(a, Append)
    assert type(a.record).__name__ == "Usage"
    a = loop.send(None)
    assert a == Done(TurnDone("Hello", TurnUsage(0, 10, 2, 0, False)))
    with pytest.raises(RuntimeError, match="the turn is over"):
        loop.send(None)


def test_a_tool_batch_emits_started_runs_then_appends_in_order() -> None:
    loop = core()
    loop.start()
    loop.send(None)  # the user record
    calls = (ToolCall("a", "clock", "{}"), ToolCall("b", "teleport", "{}"))
    actions = [loop.send(done(None, *calls)), loop.send(None), loop.send(None)]
    assert [type(x).__name__ for x in actions] == ["Append", "Append", "Emit"]
    assert actions[2] == Emit(ToolCallStartedEvent("clock"))
    assert loop.send(None) == Emit(ToolCallStartedEvent("teleport"))
    # Only the valid call goes to the port, numbered before anything runs.
    assert loop.send(None) == RunTools((ToolRequest(0, "clock", "{}"),))
    a = loop.send((ToolResponse("noon", ResultClass.PUBLIC, False, False),))
    assert isinstance(a, Append)
    assert a.record == ToolResult(a.record.time, 0, "a", "noon", ResultClass.PUBLIC, False, False)
    assert loop.send(None) == Emit(ToolResultEvent("clock", ResultClass.PUBLIC, False, "done"))
    a = loop.send(None)
    assert isinstance(a, Append)
    assert isinstance(a.record, ToolResult)
    assert (a.record.call, a.record.tool_call_id) == (1, "b")
    assert a.record.content.startswith("error: there is no tool named")
    assert loop.send(None) == Emit(
        ToolResultEvent("teleport", ResultClass.PUBLIC, False, "refused")
    )
    assert isinstance(loop.send(None), Complete)
    assert loop.next_call == 2


def test_errors_end_the_turn() -> None:
    for err, code in [
        (HttpStatus(400, "too long"), ErrorCode.SESSION_FULL),
        (HttpStatus(503, "loading"), ErrorCode.INFERENCE),
        (Stalled("quiet"), ErrorCode.INFERENCE),
    ]:
        loop = core()
        loop.start()
        loop.send(None)
        outcome = loop.send(err)
        assert isinstance(outcome, Done)
        assert isinstance(outcome.outcome, WireError)
        assert outcome.outcome.code is code


def test_the_contract_with_the_runner_is_checked() -> None:
    loop = core()
    loop.start()
    with pytest.raises(RuntimeError, match="once"):
        loop.start()
    loop.send(None)
    with pytest.raises(TypeError, match="Completion or an InferError"):
        loop.send("not a completion")
    with pytest.raises(ValueError, match="session_start"):
        core([User(T, "no start")])


def test_what_the_log_says() -> None:
    records: list[LogRecord] = [
        START,
        Assistant(T, None, None, (ToolCall("x", "clock", "{}"), ToolCall("y", "clock", "{}"))),
        ToolResult(T, 4, "x", "t", ResultClass.PUBLIC, False, False),
    ]
    assert next_call_number(records) == 5
    assert next_call_number([START]) == 0
    assert [c.id for c in unanswered_calls(records)] == ["y"]
    assert unanswered_calls([START]) == ()
