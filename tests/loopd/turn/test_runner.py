"""The turn loop end to end: the runner, the real client, the fake server, a real session log.

Record sequences of a plain, a tool and a call_tool turn; every limit row of the brief's section
3, each leaving the session usable; CacheLoss; session_full with nothing appended; find_tool hit
and miss; unknown and schema-invalid calls never reaching the port; the call counter on resume.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.session.store import SessionLog, SessionStore
from boxmaker.loopd.tools.port import FakeTools
from boxmaker.loopd.tools.registry import (
    CALL_TOOL,
    FIND_TOOL,
    NO_TOOL_MATCHES,
    default_registry,
    find_tool_answer,
)
from boxmaker.loopd.turn.limits import TRUNCATED_MARK
from boxmaker.loopd.turn.loop import INTERRUPTED_NOTE
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import (
    Assistant,
    CacheLoss,
    CacheLossEvent,
    ContentEvent,
    ErrorCode,
    ResultClass,
    ThinkingCappedEvent,
    ToolCall,
    ToolCallStartedEvent,
    ToolRequest,
    ToolResult,
    ToolResultEvent,
    TurnDone,
    TurnEvent,
    TurnUsage,
    Usage,
    User,
    WireError,
)
from tests.loopd.turn.conftest import Env
from tests.loopd.turn.support import (
    RecordingPort,
    Said,
    Ticker,
    calls,
    chat_bodies,
    completion_events,
    names,
    new_session,
    say,
)
from tests.support.fakeserver import json_reply, sse_reply

NOON = "2026-11-30T12:00:00.000Z"


class Turns:
    """Runs turns of one session against the env, with a recording FakeTools port."""

    def __init__(self, env: Env, log: SessionLog, **loop: Any) -> None:
        self.env = env
        self.log = log
        self.config = env.config(**loop)
        self.port = RecordingPort(FakeTools(clock=lambda: NOON))
        self.clock = Ticker()
        self.events: list[TurnEvent] = []

    def run(self, text: str, *script: Said, thinking: bool = True) -> TurnDone | WireError:
        self.env.model.load(script)
        self.events = []
        return run_turn(
            self.log,
            text,
            client=Client(self.config.inference),
            port=self.port,
            config=self.config.loop,
            thinking=thinking,
            on_event=self.events.append,
            clock=self.clock,
        )

    def new_records(self, since: int) -> list[object]:
        return list(self.log.records[since:])


def echo_via_call_tool(text: str) -> tuple[str, object]:
    return (CALL_TOOL, {"name": "echo", "arguments": {"text": text}})


# ---- record sequences ---------------------------------------------------------------------------


def test_plain_turn_records_user_assistant_usage(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        out = t.run("Hello?", Said(content="Hi.", reasoning="Greet back."))
        assert names(log.records) == ["SessionStart", "User", "Assistant", "Usage"]
        user, assistant, usage = log.records[1:]
        assert isinstance(user, User)
        assert user.content == "Hello?"
        assert assistant == Assistant(assistant.time, "Hi.", "Greet back.", ())
        assert isinstance(usage, Usage)
        fields = (usage.cache_n, usage.prompt_n, usage.predicted_n, usage.reasoning_tokens)
        assert out == TurnDone("Hi.", TurnUsage(*fields, thinking_capped=False))
        assert ContentEvent("Hi.") in t.events
        assert not [e for e in t.events if isinstance(e, ToolCallStartedEvent | ToolResultEvent)]


def test_tool_turn_records_and_events_in_order(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        out = t.run("What time is it?", calls(("clock", {})), say("It is noon."))
        assert names(log.records[1:]) == [
            "User", "Assistant", "Usage", "ToolResult", "Assistant", "Usage",
        ]  # fmt: skip
        result = log.records[4]
        assert result == ToolResult(
            result.time, 0, "call_0", NOON, ResultClass.PUBLIC, False, False
        )
        assert t.port.seen == [ToolRequest(0, "clock", "{}")]
        assert isinstance(out, TurnDone)
        assert out.content == "It is noon."
        tool_events = [e for e in t.events if isinstance(e, ToolCallStartedEvent | ToolResultEvent)]
        assert tool_events == [
            ToolCallStartedEvent("clock"),
            ToolResultEvent("clock", ResultClass.PUBLIC, truncated=False),
        ]
        # The tool's events come before the answer's content.
        assert t.events.index(tool_events[-1]) < t.events.index(ContentEvent("It is noon."))


def test_call_tool_turn_finds_then_calls_echo(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        out = t.run(
            "Echo hi.",
            calls((FIND_TOOL, {"query": "ECHO"})),
            calls(echo_via_call_tool("hi")),
            say("Done."),
        )
        assert names(log.records[1:]) == [
            "User", "Assistant", "Usage", "ToolResult",
            "Assistant", "Usage", "ToolResult", "Assistant", "Usage",
        ]  # fmt: skip
        found, echoed = (r for r in log.records if isinstance(r, ToolResult))
        assert found.content == find_tool_answer(default_registry(), "echo")
        assert found.content.endswith("\nCall it with call_tool.")
        assert (echoed.call, echoed.content) == (1, "hi")
        # find_tool is loopd's; the port saw only the echo, with the inner object's JSON text.
        assert t.port.seen == [ToolRequest(1, "echo", '{"text":"hi"}')]
        assert ToolCallStartedEvent("echo") in t.events
        assert isinstance(out, TurnDone)


def test_find_tool_miss(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        t.run("Teleport me.", calls((FIND_TOOL, {"query": "teleport"})), say("I can't."))
        (result,) = (r for r in log.records if isinstance(r, ToolResult))
        assert result.content == NO_TOOL_MATCHES == "No tool matches."
        assert t.port.seen == []


def test_unknown_and_invalid_calls_never_reach_the_port_and_the_loop_goes_on(env: Env) -> None:
    bad = calls(
        ("teleport", {}),
        ("echo", {"text": "direct"}),
        ("clock", "[]"),
        ("clock", "{not json"),
        (CALL_TOOL, "{not json"),
        (CALL_TOOL, {"name": "nope", "arguments": {}}),
        (CALL_TOOL, {"name": "clock", "arguments": {}}),
        (CALL_TOOL, {"name": "echo", "arguments": {"text": 1}}),
        (CALL_TOOL, {"name": "echo", "arguments": {}}),
        (FIND_TOOL, {"query": ["x"]}),
    )
    with new_session(env.home) as log:
        t = Turns(env, log)
        out = t.run("Break things.", bad, say("Sorry."))
        results = [r for r in log.records if isinstance(r, ToolResult)]
        assert len(results) == len(bad.calls)
        assert all(r.content.startswith("error: ") for r in results), [r.content for r in results]
        assert [r.tool_call_id for r in results] == [c.id for c in bad.calls]
        assert [r.call for r in results] == list(range(len(bad.calls)))
        assert t.port.seen == []
        assert isinstance(out, TurnDone)
        assert out.content == "Sorry."


# ---- the limits -------------------------------------------------------------------------------


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
        assert ToolResultEvent("echo", ResultClass.PUBLIC, truncated=True) in t.events
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


# ---- across turns and resumes --------------------------------------------------------------------


def test_call_counter_is_restored_on_resume(env: Env) -> None:
    with new_session(env.home) as log:
        Turns(env, log).run("Two calls.", calls(("clock", {}), echo_via_call_tool("x")), say("."))
    with SessionStore(env.home).open("s1") as log:
        t = Turns(env, log)
        t.run("Again.", calls(echo_via_call_tool("y")), say("."))
        assert t.port.seen == [ToolRequest(2, "echo", '{"text":"y"}')]
        assert [r.call for r in log.records if isinstance(r, ToolResult)] == [0, 1, 2]


def test_calls_left_unanswered_by_an_interrupted_turn_get_a_result_first(env: Env) -> None:
    with new_session(env.home) as log:
        # A worker died after the completion was recorded and before its tool ran.
        log.append(User(NOON, "What time is it?"))
        log.append(Assistant(NOON, None, None, (ToolCall("c9", "clock", "{}"),)))
        log.append(Usage(NOON, 0, 10, 5, 0, False))
        t = Turns(env, log)
        out = t.run("Hello?", say("Hi."))
        assert isinstance(out, TurnDone)
        note = log.records[4]
        assert isinstance(note, ToolResult)
        assert note.tool_call_id == "c9"
        assert note.content == INTERRUPTED_NOTE
        assert isinstance(log.records[5], User)
        assert t.port.seen == []


def test_no_thinking_changes_only_the_generation_switch(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        t.run("One.", Said(content="A.", reasoning="Because."))
        t.run("Two.", say("B."), thinking=False)
        first, second = chat_bodies(env.fake)
        assert first["chat_template_kwargs"] == {"enable_thinking": True}
        assert second["chat_template_kwargs"] == {"enable_thinking": False}
        assert second["messages"][: len(first["messages"])] == first["messages"]
        # The earlier completion's reasoning is sent back unchanged.
        assert second["messages"][2]["reasoning_content"] == "Because."


def test_each_append_is_on_disk_before_its_event(env: Env) -> None:
    with new_session(env.home) as log:
        t = Turns(env, log)
        lines_at_event: list[tuple[TurnEvent, int]] = []

        def on_event(event: TurnEvent) -> None:
            lines_at_event.append((event, log.log_path.read_bytes().count(b"\n")))

        env.model.load([calls(("clock", {})), say("Noon.")])
        run_turn(
            log, "Time?", client=Client(t.config.inference), port=t.port, config=t.config.loop,
            on_event=on_event,
        )  # fmt: skip
        result_event = next(n for e, n in lines_at_event if isinstance(e, ToolResultEvent))
        lines = log.log_path.read_bytes().splitlines()
        assert orjson.loads(lines[result_event - 1])["type"] == "tool_result"
