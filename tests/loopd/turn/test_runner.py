"""The turn loop end to end: the runner, the real client, the fake server, a real session log.

Record sequences of a plain, a tool and a call_tool turn; find_tool hit and miss; unknown and
schema-invalid calls never reaching the port; the call counter on resume; `thinking: false`; each
append on disk before its event. The limits are in test_turn_limits.py.
"""

from __future__ import annotations

import orjson

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.tools.registry import (
    CALL_TOOL,
    FIND_TOOL,
    NO_TOOL_MATCHES,
    find_tool_answer,
)
from boxmaker.loopd.turn.loop import INTERRUPTED_NOTE
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import (
    Assistant,
    ContentEvent,
    ResultClass,
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
)
from boxmaker.session.store import SessionStore
from tests.support.fake_tools import fake_registry
from tests.support.turn import (
    NOON,
    Env,
    Said,
    Turns,
    calls,
    chat_bodies,
    echo_via_call_tool,
    names,
    new_session,
    say,
)

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
            ToolResultEvent("clock", ResultClass.PUBLIC, truncated=False, outcome="done"),
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
        assert found.content == find_tool_answer(fake_registry(), "echo")
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
