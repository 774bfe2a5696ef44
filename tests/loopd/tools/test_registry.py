"""The registry, the three core schemas, find_tool's answers and how each call is resolved."""

from __future__ import annotations

import orjson
import pytest

from boxmaker.loopd.tools.port import broker_registry
from boxmaker.loopd.tools.registry import (
    CALL_TOOL,
    CLOCK_SCHEMA,
    CORE_SCHEMAS,
    FIND_TOOL,
    FIND_TOOL_FOOTER,
    NO_TOOL_MATCHES,
    RECALL_SCHEMA,
    Answer,
    Dispatch,
    RegisteredTool,
    Registry,
    find_tool_answer,
    resolve,
)
from boxmaker.proto import ToolCall, ToolSchema
from tests.support.fake_tools import ECHO_SCHEMA, fake_registry

REG = fake_registry()
ALPHA = ToolSchema("alpha", "Reads the WEATHER for a city.", {"type": "object"})
BETA = ToolSchema("beta_weather", "Something else.", {"type": "object"})


def call(name: str, arguments: object) -> ToolCall:
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return ToolCall("call_1", name, text)


def test_the_tools_array_is_the_three_core_schemas_in_order() -> None:
    assert [s.name for s in CORE_SCHEMAS] == ["clock", FIND_TOOL, CALL_TOOL]
    # Fixed for the epoch: nothing volatile in them (the baseline's bytes come from these).
    assert orjson.dumps([s.to_json() for s in CORE_SCHEMAS]) == orjson.dumps(
        [s.to_json() for s in CORE_SCHEMAS]
    )


def test_m2b_registry_is_clock_core_and_echo_and_recall() -> None:
    got = [(t.schema.name, t.core) for t in REG.tools]
    assert got == [("clock", True), ("echo", False), ("recall", False)]


def test_recall_is_found_never_a_core_schema() -> None:
    assert RECALL_SCHEMA not in CORE_SCHEMAS  # the baseline's tools array stays the three
    body, footer = find_tool_answer(REG, "folded").rsplit("\n", 1)
    assert orjson.loads(body) == [RECALL_SCHEMA.to_json()]
    assert footer == "Call it with call_tool."
    # Called directly it runs too: where every brokerd tool is core, no call_tool is offered
    # and a folded epoch's tools array holds recall itself (registry.folded_tools).
    got = resolve(ToolCall("c1", "recall", '{"epoch": 0, "seq": 3}'), REG)
    assert got == Dispatch("recall", '{"epoch": 0, "seq": 3}')
    args = '{"name": "recall", "arguments": {"epoch": 0, "seq": "3"}}'
    bad = resolve(ToolCall("c2", "call_tool", args), REG)
    assert bad == Answer(
        "recall", f"error: recall: {SCHEMA_MISS}$.seq: expected integer, got string", True
    )


SCHEMA_MISS = "the arguments do not match the tool's schema: "


def test_the_broker_registry_keeps_loopds_recall() -> None:
    fake = ToolSchema("recall", "brokerd's, shadowing loopd's", {"type": "object"})
    reg = broker_registry([ToolSchema("read_file", "Reads a file.", {"type": "object"}), fake])
    assert [t.schema.name for t in reg.tools] == ["clock", "read_file", "recall"]
    assert reg.get("recall") == RegisteredTool(RECALL_SCHEMA, core=False)


def test_find_tool_hit_gives_the_schemas_then_the_brief_text() -> None:
    text = find_tool_answer(REG, "ECHO")
    body, footer = text.rsplit("\n", 1)
    assert footer == FIND_TOOL_FOOTER == "Call it with call_tool."
    assert orjson.loads(body) == [ECHO_SCHEMA.to_json()]


def test_find_tool_searches_descriptions_case_insensitively() -> None:
    reg = Registry([RegisteredTool(ALPHA, False), RegisteredTool(BETA, False)])
    found = orjson.loads(find_tool_answer(reg, "Weather").rsplit("\n", 1)[0])
    assert [t["name"] for t in found] == ["alpha", "beta_weather"]  # registry order


def test_find_tool_miss_is_the_brief_text() -> None:
    assert find_tool_answer(REG, "teleport") == NO_TOOL_MATCHES == "No tool matches."


def test_find_tool_never_offers_a_core_tool() -> None:
    # clock is in the tools array already, and call_tool refuses it.
    assert find_tool_answer(REG, "clock") == NO_TOOL_MATCHES
    assert find_tool_answer(REG, "time") == NO_TOOL_MATCHES


def test_find_tool_is_answered_by_loopd() -> None:
    got = resolve(call(FIND_TOOL, {"query": "echo"}), REG)
    assert got == Answer(FIND_TOOL, find_tool_answer(REG, "echo"), error=False)


def test_call_tool_sends_the_inner_object_as_json_text() -> None:
    got = resolve(call(CALL_TOOL, {"name": "echo", "arguments": {"text": "hé"}}), REG)
    assert got == Dispatch("echo", '{"text":"hé"}')


def test_clock_goes_to_the_port_with_its_arguments_as_sent() -> None:
    assert resolve(call("clock", "{ }"), REG) == Dispatch("clock", "{ }")


@pytest.mark.parametrize(
    ("tool_call", "named", "says"),
    [
        (call("teleport", {}), "teleport", 'there is no tool named "teleport"'),
        (
            call("echo", {"text": "x"}),
            "echo",
            "echo is not called directly: call it with call_tool",
        ),
        (call("clock", "[]"), "clock", "clock: the arguments must be a JSON object"),
        (call("clock", "{"), "clock", "clock: the arguments are not JSON"),
        (call(FIND_TOOL, {}), FIND_TOOL, 'missing required property "query"'),
        (call(FIND_TOOL, {"query": 3}), FIND_TOOL, "$.query: expected string, got integer"),
        (call(CALL_TOOL, "not json"), CALL_TOOL, "call_tool: the arguments are not JSON"),
        (call(CALL_TOOL, {"name": "echo"}), CALL_TOOL, 'missing required property "arguments"'),
        (
            call(CALL_TOOL, {"name": "echo", "arguments": "text"}),
            CALL_TOOL,
            "$.arguments: expected object, got string",
        ),
        (
            call(CALL_TOOL, {"name": "nope", "arguments": {}}),
            "nope",
            'call_tool: there is no tool named "nope"',
        ),
        (  # issue 40: the tool model sent this again and again; the error names the way out
            call(CALL_TOOL, {"name": FIND_TOOL, "arguments": {"query": "copy file"}}),
            FIND_TOOL,
            "call_tool: find_tool is not called through call_tool. Call a tool directly: clock.",
        ),
        (
            call(CALL_TOOL, {"name": "clock", "arguments": {}}),
            "clock",
            "call_tool: clock is a core tool; call it directly",
        ),
        (
            call(CALL_TOOL, {"name": "echo", "arguments": {"text": 1}}),
            "echo",
            "echo: the arguments do not match the tool's schema: $.text: expected string",
        ),
        (
            call(CALL_TOOL, {"name": "echo", "arguments": {}}),
            "echo",
            'missing required property "text"',
        ),
    ],
)
def test_a_call_the_port_must_not_see_is_answered_with_what_is_wrong(
    tool_call: ToolCall, named: str, says: str
) -> None:
    got = resolve(tool_call, REG)
    assert isinstance(got, Answer)
    assert got.error
    assert got.name == named
    assert got.content.startswith("error: ")
    assert says in got.content


def test_registry_refuses_duplicates_and_loopds_own_names() -> None:
    """Refused entries, each said in `refused`; the first of a name serves (issue 29.4)."""
    reg = Registry([RegisteredTool(CLOCK_SCHEMA, True), RegisteredTool(CLOCK_SCHEMA, False)])
    assert reg.tools == (RegisteredTool(CLOCK_SCHEMA, True),)
    assert len(reg.refused) == 1
    assert "second tool" in reg.refused[0]
    reg = Registry([RegisteredTool(ToolSchema(FIND_TOOL, "x", {}), False)])
    assert reg.tools == ()
    assert "loopd's own" in reg.refused[0]
