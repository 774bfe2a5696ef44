"""Tool failures are data: a port that raises, hangs or answers nonsense on one call becomes that
call's ToolResult, the batch's other calls keep theirs, and the turn goes on. Run with parallel
tool calls on and off."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.tools.registry import CALL_TOOL
from boxmaker.loopd.turn.loop import ToolFailure
from boxmaker.loopd.turn.runner import run_tools, run_turn
from boxmaker.proto import ResultClass, ToolRequest, ToolResponse, ToolResult, TurnDone
from tests.support.fake_tools import FakeTools, fake_registry
from tests.support.turn import Env, calls, new_session, say

TIMEOUT_MS = 150
UPPER_S = 3.0  # a turn bounded by a 150 ms tool timeout that has not ended by then never will


def echo(text: str) -> tuple[str, object]:
    return (CALL_TOOL, {"name": "echo", "arguments": {"text": text}})


class Misbehaving:
    """FakeTools, except for echo texts that say what to do instead."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.inner = FakeTools()

    def call(self, request: ToolRequest) -> Any:
        if '"raise"' in request.arguments:
            raise RuntimeError("boom")
        if '"hang"' in request.arguments:
            self.release.wait(30)  # far past the timeout; released when the test ends
            return self.inner.call(request)
        if '"garbage"' in request.arguments:
            return "not a response"
        if '"surrogate"' in request.arguments:
            return ToolResponse("bad \ud800", ResultClass.PUBLIC, False, False)
        return self.inner.call(request)


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
def test_each_failure_is_its_own_result_and_the_others_survive(env: Env, parallel: bool) -> None:
    port = Misbehaving()
    config = env.config(parallel_tools=parallel, tool_timeout_ms=TIMEOUT_MS)
    batch = calls(echo("one"), echo("raise"), echo("hang"), echo("garbage"), echo("surrogate"),
                  echo("two"))  # fmt: skip
    env.model.load([batch, say("Done.")])
    try:
        with new_session(env.home) as log:
            started = time.monotonic()
            out = run_turn(log, "Go.", client=Client(config.inference), port=port,
                           registry=fake_registry(), config=config.loop)  # fmt: skip
            took = time.monotonic() - started
            results = [r.content for r in log.records if isinstance(r, ToolResult)]
    finally:
        port.release.set()
    assert isinstance(out, TurnDone)
    assert out.content == "Done."
    assert results == [
        "one",
        "error: the tool echo failed: it raised RuntimeError: boom",
        f"error: the tool echo failed: it did not answer within {TIMEOUT_MS} ms (tool_timeout_ms)",
        "error: the tool echo failed: it answered str, not a response",
        "error: the tool echo answered something unusable: a lone surrogate at index 4, which "
        "UTF-8 cannot carry",
        "two",
    ]
    # The hung call cost its timeout, once, and no more.
    assert TIMEOUT_MS / 1000 <= took < UPPER_S


def test_run_tools_returns_outcomes_in_call_order_whatever_finishes_first() -> None:
    class Backwards:
        def call(self, request: ToolRequest) -> ToolResponse:
            time.sleep(0.02 * (3 - request.call))
            return ToolResponse(str(request.call), ResultClass.PUBLIC, False, False)

    requests = [ToolRequest(i, "echo", "{}") for i in range(3)]
    got = run_tools(Backwards(), requests, 2.0, parallel=True)
    assert [o.content for o in got if isinstance(o, ToolResponse)] == ["0", "1", "2"]


def test_sequential_calls_each_get_their_own_timeout() -> None:
    release = threading.Event()

    class HangsFirst:
        def call(self, request: ToolRequest) -> ToolResponse:
            if request.call == 0:
                release.wait(30)
            return ToolResponse("ok", ResultClass.PUBLIC, False, False)

    try:
        got = run_tools(HangsFirst(), [ToolRequest(i, "x", "{}") for i in range(2)], 0.1,
                        parallel=False)  # fmt: skip
    finally:
        release.set()
    assert isinstance(got[0], ToolFailure)
    assert got[1] == ToolResponse("ok", ResultClass.PUBLIC, False, False)
