"""The JSON-Schema subset that checks tool arguments before the port sees them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.loopd.tools.schema import check_arguments, json_type_name, validate

ECHO = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


@pytest.mark.parametrize(
    ("value", "schema"),
    [
        ({"text": "hi"}, ECHO),
        ({"text": "hi", "extra": 1}, ECHO),  # extra keys are allowed unless the schema says not
        (3, {"type": "integer"}),
        (3.0, {"type": "integer"}),  # JSON Schema: an integral number is an integer
        (3.5, {"type": "number"}),
        (3, {"type": "number"}),
        (None, {"type": "null"}),
        (True, {"type": "boolean"}),
        ("a", {"type": ["integer", "string"]}),
        ([1, 2], {"type": "array", "items": {"type": "integer"}}),
        ("red", {"enum": ["red", "green"]}),
        (1, {"enum": [1.0]}),
        ({"a": {"b": [{"c": "x"}]}}, {"properties": {"a": {"properties": {"b": {"items": {}}}}}}),
        ("anything", {"type": "string", "format": "date-time", "minLength": 99}),  # ignored
        ({}, {"type": "object", "properties": {}}),
        ("x", {"type": "uuid"}),  # an unknown type name constrains nothing
    ],
)
def test_matches(value: Any, schema: dict[str, Any]) -> None:
    assert validate(value, schema) is None


@pytest.mark.parametrize(
    ("value", "schema", "problem"),
    [
        ({}, ECHO, '$: missing required property "text"'),
        ({"text": 5}, ECHO, "$.text: expected string, got integer"),
        (True, {"type": "integer"}, "$: expected integer, got boolean"),
        (True, {"type": "number"}, "$: expected number, got boolean"),
        (1, {"type": "boolean"}, "$: expected boolean, got integer"),
        (2.5, {"type": "integer"}, "$: expected integer, got number"),
        ([1, "2"], {"items": {"type": "integer"}}, "$[1]: expected integer, got string"),
        ("blue", {"enum": ["red", "green"]}, '$: expected one of "red", "green", got "blue"'),
        (True, {"enum": [1]}, "$: expected one of 1, got true"),
        (None, {"type": ["integer", "string"]}, "$: expected integer or string, got null"),
        (
            {"a": 1, "b": 2},
            {"properties": {"a": {}}, "additionalProperties": False},
            '$: unexpected property "b" (allowed: a)',
        ),
        (
            {"outer": {"inner": [{"n": "x"}]}},
            {
                "properties": {
                    "outer": {
                        "properties": {
                            "inner": {"items": {"properties": {"n": {"type": "integer"}}}}
                        }
                    }
                }
            },
            "$.outer.inner[0].n: expected integer, got string",
        ),
    ],
)
def test_refuses_naming_the_place(value: Any, schema: dict[str, Any], problem: str) -> None:
    assert validate(value, schema) == problem


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("{", "the arguments are not JSON"),
        ("", "the arguments are not JSON"),
        ("[1]", "the arguments must be a JSON object, got array"),
        ('"text"', "the arguments must be a JSON object, got string"),
        ("null", "the arguments must be a JSON object, got null"),
        ('{"text": 1}', "the arguments do not match the tool's schema: $.text: expected string"),
    ],
)
def test_check_arguments_says_what_is_wrong(text: str, start: str) -> None:
    got = check_arguments(text, ECHO)
    assert isinstance(got, str)
    assert got.startswith(start)


def test_check_arguments_returns_the_object() -> None:
    assert check_arguments('{"text": "é"}', ECHO) == {"text": "é"}


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_every_value_matches_its_own_type(value: Any) -> None:
    # Never raises, and a value always matches the type name it is reported as.
    assert validate(value, {"type": json_type_name(value)}) is None
    others = {"object", "array", "string", "boolean", "null"} - {json_type_name(value)}
    if json_type_name(value) in {"integer", "number"}:
        others.discard("number")
    for other in others:
        assert validate(value, {"type": other}) is not None
