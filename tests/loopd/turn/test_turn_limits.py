"""The limits of the brief's section 3 end to end (runner, real client, fake server, real log), one
test or more per row, each leaving the session usable: tool_iterations, repeat_detection (across
completions and within one batch), tool_result_cap at a multi-byte boundary, the thinking cap in
Usage, context full as session_full with nothing appended, other inference errors; and CacheLoss.
"""

from __future__ import annotations

import itertools

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.turn.limits import TRUNCATED_MARK
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import (
    CacheLoss,
    CacheLossEvent,
    ErrorCode,
    ResultClass,
    ThinkingCappedEvent,
    ToolResult,
    ToolResultEvent,
    TurnDone,
    TurnEvent,
    TurnUsage,
    Usage,
    WireError,
)
from boxmaker.session.store import SessionLog
from tests.support.fake_tools import FakeTools
from tests.support.replies import json_reply, sse_reply
from tests.support.turn import (
    Env,
    Said,
    Turns,
    calls,
    chat_bodies,
    completion_events,
    echo_via_call_tool,
    names,
    new_session,
    say,
)


def test_tool_iterations_ends_the_turn_and_the_session_stays_usable(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log, tool_iterations=2)
        out = t.run(
            "Loop.",
            calls(echo_via_call_tool("1"), prefix="a"),
            calls(echo_via_call_tool("2"), prefix="b"),
            calls(echo_via_call_tool("3"), prefix="c"),
            say("never asked for"),
        )
        assert isinstance(out, WireError)
        assert out.code is ErrorCode.TURN_LIMIT
        assert "limit of 2 tool rounds (tool_iterations)" in out.message
        assert env.model.left() == 1
        assert [r.arguments for r in t.port.seen] == ['{"text":"1"}', '{"text":"2"}']
        last = log.records[-1]
        # The third round's call is answered, not run: the log never holds a call without one.
        assert isinstance(last, ToolResult)
        assert last.tool_call_id == "c_0"
        assert last.content.startswith("not run: the turn reached its limit of 2 tool rounds")
        before = len(chat_bodies(env.fake))
        assert t.run("Still there?", say("Yes.")) == TurnDone("Yes.", _usage(log))
        assert len(chat_bodies(env.fake)) == before + 1


def _usage(log: SessionLog) -> TurnUsage:
    u = log.records[-1]
    assert isinstance(u, Usage)
    return TurnUsage(u.cache_n, u.prompt_n, u.predicted_n, u.reasoning_tokens, u.thinking_capped)


def test_a_repeated_call_is_not_run_and_the_model_gets_one_more_completion(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        out = t.run(
            "Echo a twice.",
            calls(echo_via_call_tool("a"), prefix="x"),
            calls(echo_via_call_tool("a"), prefix="y"),
            say("Done."),
        )
        assert isinstance(out, TurnDone)
        assert out.content == "Done."
        assert len(t.port.seen) == 1
        repeat = [r for r in log.records if isinstance(r, ToolResult)][1]
        assert repeat.tool_call_id == "y_0"
        assert repeat.content.startswith("not run: this call repeats an earlier call")


def test_a_second_repeat_ends_the_turn(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        script = [calls(echo_via_call_tool("a"), prefix=p) for p in "xyz"]
        out = t.run("Echo a forever.", *script, say("never asked for"))
        assert isinstance(out, WireError)
        assert out.code is ErrorCode.TURN_LIMIT
        assert "repeated again" in out.message
        assert len(t.port.seen) == 1
        assert isinstance(t.run("Hello?", say("Hi.")), TurnDone)


def test_repeats_are_detected_within_one_batch(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        same = echo_via_call_tool("a")
        out = t.run("Twice at once.", calls(same, same, ("clock", {})), say("Done."))
        assert isinstance(out, TurnDone)
        assert [r.tool for r in t.port.seen] == ["echo", "clock"]
        # Three in one batch is a second repeat: nothing of that batch runs.
        t.port.seen.clear()
        out = t.run("Thrice at once.", calls(same, same, same, ("clock", {})))
        assert isinstance(out, WireError)
        assert out.code is ErrorCode.TURN_LIMIT
        assert t.port.seen == []
        results = [r for r in log.records if isinstance(r, ToolResult)][-4:]
        assert [r.content.split(":")[0] for r in results] == ["not run"] * 3 + ["not run"]


def test_repeat_detection_off_runs_every_call(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log, repeat_detection=False)
        same = echo_via_call_tool("a")
        out = t.run("Echo a twice.", calls(same), calls(same), calls(same), say("Done."))
        assert isinstance(out, TurnDone)
        assert len(t.port.seen) == 3


def test_tool_result_cap_cuts_at_a_character_boundary(env: Env) -> None:
    text = "abcdefghi" + "é" * 10  # byte 10 falls inside the first "é"
    with new_session(env.home) as log:
        t = Turns(env, log, tool_result_cap=10)
        t.run("Echo.", calls(echo_via_call_tool(text)), say("Done."))
        (result,) = (r for r in log.records if isinstance(r, ToolResult))
        assert result.truncated
        assert result.content == "abcdefghi" + TRUNCATED_MARK
        assert (
            ToolResultEvent("echo", ResultClass.PUBLIC, truncated=True, outcome="done") in t.events
        )
        # The next request carries the capped text, never the whole.
        last = chat_bodies(env.fake)[-1]["messages"]
        assert last[-1] == {"role": "tool", "tool_call_id": "call_0", "content": result.content}


def test_thinking_cap_is_recorded_in_usage(env: Env) -> None:
    # Five reasoning tokens, one per chunk with its timings, then the answer; the cap is 3.
    events = completion_events(Said(content="42"), 0, 10, 8)
    head, tail = events[:1], events[1:]
    thinking = [
        {**head[0], "choices": [{"finish_reason": None, "index": 0,
         "delta": {"reasoning_content": f"t{i} "}}],
         "timings": {"cache_n": 0, "prompt_n": 10, "predicted_n": i + 1}}
        for i in range(5)
    ]  # fmt: skip
    env.fake.expect("POST", "/v1/chat/completions", sse_reply(head + thinking + tail))
    env.fake.on("POST", "/v1/chat/completions/control", json_reply(200, {"success": True}))
    with new_session(env.home) as log:
        config = env.config()
        from dataclasses import replace

        inference = replace(config.inference, thinking_cap=3)
        seen: list[TurnEvent] = []
        out = run_turn(
            log, "Think.", client=Client(inference), port=FakeTools(), config=config.loop,
            on_event=seen.append,
        )  # fmt: skip
        usage = log.records[-1]
        assert isinstance(usage, Usage)
        assert usage.thinking_capped
        assert isinstance(out, TurnDone)
        assert out.usage.thinking_capped
        assert ThinkingCappedEvent(3) in seen


def test_context_full_is_session_full_with_nothing_appended(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        out = t.run("Hello?", calls(("clock", {})), Said(status=400))
        assert isinstance(out, WireError)
        assert out.code is ErrorCode.SESSION_FULL
        assert "exceeds the available context size" in out.message
        # The request that got the 400 left nothing: the log ends with the tool result before it.
        assert names(log.records[1:]) == ["User", "Assistant", "Usage", "ToolResult"]
        data = log.log_path.read_bytes()
        out = t.run("Short one?", Said(status=400))
        assert isinstance(out, WireError)
        assert out.code is ErrorCode.SESSION_FULL
        assert log.log_path.read_bytes()[len(data) :].count(b"\n") == 1  # only the User line
        # Still usable: a turn that fits goes on from there.
        assert isinstance(t.run("And now?", say("Fine.")), TurnDone)


def test_another_inference_error_ends_the_turn_as_inference(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        out = t.run("Hello?", Said(status=500))
        assert isinstance(out, WireError)
        assert out.code is ErrorCode.INFERENCE
        assert out.message.startswith("http: HTTP 500")
        assert names(log.records[1:]) == ["User"]


def test_cache_loss_against_the_previous_completion(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        t.run("One.", say("First."))
        before = log.records[-1]
        assert isinstance(before, Usage)
        t.run("Two.", Said(content="Second.", cache_n=0))
        assert names(log.records[-4:]) == ["User", "Assistant", "Usage", "CacheLoss"]
        loss = log.records[-1]
        expected = before.cache_n + before.prompt_n + before.predicted_n
        assert loss == CacheLoss(loss.time, expected, 0)
        assert CacheLossEvent(expected, 0) in t.events


def test_cache_loss_between_two_completions_of_one_turn(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        t.run("Time?", calls(("clock", {})), Said(content="Noon.", cache_n=5))
        first, second = (r for r in log.records if isinstance(r, Usage))
        assert names(log.records[-3:]) == ["Assistant", "Usage", "CacheLoss"]
        expected = first.cache_n + first.prompt_n + first.predicted_n
        loss = log.records[-1]
        assert loss == CacheLoss(loss.time, expected, 5)
        assert second.cache_n == 5


def test_no_cache_loss_when_every_request_extends_the_one_before(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        t.run("One.", say("First."))
        t.run("Two.", calls(("clock", {})), say("Second."))
        t.run("Three.", say("Third."))
        assert not [r for r in log.records if isinstance(r, CacheLoss)]
        usages = [r for r in log.records if isinstance(r, Usage)]
        # The scripted server's cache reports exactly the previous total each time.
        for a, b in itertools.pairwise(usages):
            assert b.cache_n == a.cache_n + a.prompt_n + a.predicted_n
