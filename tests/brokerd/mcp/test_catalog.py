"""Tool names, schema checks, per-epoch lists and results: the catalogue's pure half."""

from __future__ import annotations

from typing import Any

import pytest

from boxmaker.brokerd.mcp.catalog import (
    EpochTools,
    argument_problem,
    check_tool,
    result_text,
    split_name,
    to_response,
)
from boxmaker.proto import ToolSchema

OBJ = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


def test_a_good_tool_is_listed_as_server_dot_tool() -> None:
    got = check_tool("time", {"name": "now", "description": "d", "inputSchema": OBJ})
    assert got == ToolSchema("time.now", "d", OBJ)
    assert split_name("time.now") == ("time", "now")


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ({"name": "a.b", "inputSchema": OBJ}, "a name is"),
        ({"name": "", "inputSchema": OBJ}, "a name is"),
        ({"name": "x" * 65, "inputSchema": OBJ}, "a name is"),
        ({"name": "a b", "inputSchema": OBJ}, "a name is"),
        ({"name": 3, "inputSchema": OBJ}, "a name is"),
        ({"name": "t"}, "is not an object"),
        ({"name": "t", "inputSchema": {"type": "string"}}, '"type": "object"'),
        ({"name": "t", "inputSchema": {"type": "object", "properties": 3}}, "not a valid JSON"),
        (
            {"name": "t", "inputSchema": {"type": "object", "properties": {"a": {"type": "no"}}}},
            "not a valid JSON Schema",
        ),
        ({"name": "t", "inputSchema": {"type": "object", "required": "a"}}, "not a valid"),
        ({"name": "t", "inputSchema": {"type": "object", "x": "y" * 70000}}, "bytes, over"),
        ({"name": "t", "inputSchema": OBJ, "description": 5}, "description is not"),
    ],
)
def test_a_bad_tool_is_left_out_saying_why(tool: dict[str, Any], why: str) -> None:
    got = check_tool("s", tool)
    assert isinstance(got, str)
    assert why in got


@pytest.mark.parametrize("name", ["clock", "s.", ".t", "s.a.b", "s.a b"])
def test_names_that_are_not_mcp_tools(name: str) -> None:
    assert split_name(name) is None


def test_arguments_are_checked_against_the_listed_schema() -> None:
    schema = ToolSchema("s.t", "", OBJ)
    assert argument_problem(schema, {"a": "x"}) is None
    assert "'a' is a required property" in (argument_problem(schema, {}) or "")
    assert "a: is not of type 'string'" in (argument_problem(schema, {"a": 3}) or "")
    assert argument_problem(schema, ["a"]) is not None


def test_an_epoch_keeps_the_list_it_first_saw() -> None:
    tools = EpochTools()
    one, two = ToolSchema("s.one", "", OBJ), ToolSchema("s.two", "", OBJ)
    tools.record("s", [one])
    assert list(tools.for_epoch(0)) == ["s.one"]
    tools.record("s", [one, two])  # tools/list_changed, then listed again
    assert list(tools.for_epoch(0)) == ["s.one"]
    assert list(tools.for_epoch(1)) == ["s.one", "s.two"]
    tools.record("s", [two])
    assert list(tools.for_epoch(1)) == ["s.one", "s.two"]
    assert list(tools.for_epoch(2)) == ["s.two"]


@pytest.mark.parametrize("cap", [256, 1000, 4096])
@pytest.mark.parametrize("char", ["a", "é", "💥"])
def test_results_are_cut_at_the_cap_on_a_character(cap: int, char: str) -> None:
    text = result_text({"content": [{"type": "text", "text": char * 10_000}]}, cap)
    assert text.truncated
    assert len(text.text.encode()) <= cap
    assert set(text.text) == {char}
    response = to_response(text, trusted=False)
    assert response.truncated
    assert response.untrusted


def test_result_blocks() -> None:
    result = {
        "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "..."}],
        "isError": True,
    }
    got = result_text(result, 1000)
    assert got.text == "the tool reported an error: a\n[image content left out]"
    assert result_text({"content": [], "structuredContent": {"x": 1}}, 100).text == '{"x":1}'
    assert not to_response(result_text({"content": []}, 100), trusted=True).untrusted
