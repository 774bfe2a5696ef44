"""The shared types: exact JSON forms, round trips, and strict decoding with named fields."""

from typing import Any

import orjson
import pytest

from boxmaker.proto import (
    AssistantMessage,
    BodyError,
    EncodeError,
    ErrorCode,
    ResultClass,
    SystemMessage,
    Timings,
    ToolCall,
    ToolMessage,
    ToolRequest,
    ToolResponse,
    ToolSchema,
    UserMessage,
    WireError,
    chat_message_from_json,
)
from boxmaker.proto.tool import call_tool_target, tool_and_arguments

CALL = ToolCall("call_1", "clock", '{"tz": "UTC"}')


def test_error_codes_are_exactly_the_decisions_set() -> None:
    assert {c.value for c in ErrorCode} == {
        "bad_request",
        "internal",
        "unavailable",
        "session_full",
        "turn_limit",
        "session_busy",
        "no_such_session",
        "session_exists",
        "inference",
        "stopped",  # issue 30: the owner stopped the turn (docs/decisions/chat.md)
        "interrupted",  # M4 section 6: a repeated client_ref whose turn was cut
    }
    assert ErrorCode("bad_request") is ErrorCode.BAD_REQUEST


def test_result_class_public_is_spelt_public() -> None:
    assert ResultClass.PUBLIC.value == "public"


# Each value, and the exact bytes orjson writes for its JSON form (key order included).
EXACT: list[tuple[Any, bytes]] = [
    (CALL, b'{"id":"call_1","name":"clock","arguments":"{\\"tz\\": \\"UTC\\"}"}'),
    (
        ToolSchema("echo", "Echoes.", {"type": "object", "properties": {}}),
        b'{"name":"echo","description":"Echoes.","parameters":{"type":"object","properties":{}}}',
    ),
    (
        ToolRequest(3, "echo", '{"text":"hi"}'),
        b'{"call":3,"tool":"echo","arguments":"{\\"text\\":\\"hi\\"}"}',
    ),
    (
        ToolResponse("12:00", ResultClass.PUBLIC, False, True),
        b'{"content":"12:00","class":"public","untrusted":false,"truncated":true}',
    ),
    (Timings(10, 20, 30), b'{"cache_n":10,"prompt_n":20,"predicted_n":30}'),
    (
        WireError(ErrorCode.TURN_LIMIT, "8 tool iterations"),
        b'{"code":"turn_limit","message":"8 tool iterations"}',
    ),
]


@pytest.mark.parametrize(("value", "exact"), EXACT, ids=[type(v).__name__ for v, _ in EXACT])
def test_exact_json_and_round_trip(value: Any, exact: bytes) -> None:
    assert orjson.dumps(value.to_json()) == exact
    assert type(value).from_json(orjson.loads(exact)) == value


MESSAGES: list[tuple[Any, bytes]] = [
    (SystemMessage("Be brief."), b'{"role":"system","content":"Be brief."}'),
    (UserMessage("hi"), b'{"role":"user","content":"hi"}'),
    (AssistantMessage("hello", None), b'{"role":"assistant","content":"hello"}'),
    (
        AssistantMessage(None, "think", (CALL,)),
        b'{"role":"assistant","content":null,"reasoning_content":"think","tool_calls":'
        b'[{"id":"call_1","type":"function","function":'
        b'{"name":"clock","arguments":"{\\"tz\\": \\"UTC\\"}"}}]}',
    ),
    (ToolMessage("call_1", "12:00"), b'{"role":"tool","tool_call_id":"call_1","content":"12:00"}'),
]


@pytest.mark.parametrize(("msg", "exact"), MESSAGES, ids=[type(m).__name__ for m, _ in MESSAGES])
def test_chat_messages_in_the_request_form(msg: Any, exact: bytes) -> None:
    assert orjson.dumps(msg.to_json()) == exact
    assert chat_message_from_json(orjson.loads(exact)) == msg


def test_tool_schema_openai_form_wraps_the_plain_one() -> None:
    schema = ToolSchema("clock", "Time.", {"type": "object"})
    assert schema.to_openai() == {"type": "function", "function": schema.to_json()}


def test_tool_call_openai_round_trip() -> None:
    assert ToolCall.from_openai(CALL.to_openai()) == CALL


def test_timings_total_is_what_the_cache_holds_after() -> None:
    assert Timings(10, 20, 30).total == 60


BAD_BODIES: list[tuple[type[Any], Any, str]] = [
    (ToolCall, [], "tool_call: expected object, got array"),
    (ToolCall, {"id": "a", "name": "b"}, 'tool_call: missing key "arguments"'),
    (ToolCall, {"id": "a", "name": "b", "arguments": "{}", "x": 1}, 'unexpected key "x"'),
    (
        ToolCall,
        {"id": "a", "name": "b", "arguments": {}},
        "tool_call.arguments: expected string, got object",
    ),
    (
        ToolCall,
        {"id": None, "name": "b", "arguments": ""},
        "tool_call.id: expected string, got null",
    ),
    (
        ToolRequest,
        {"call": True, "tool": "t", "arguments": ""},
        "tool_request.call: expected integer, got boolean",
    ),
    (
        ToolRequest,
        {"call": 1.0, "tool": "t", "arguments": ""},
        "tool_request.call: expected integer, got number",
    ),
    (
        ToolRequest,
        {"call": -1, "tool": "t", "arguments": ""},
        "tool_request.call: expected integer from 0",
    ),
    (
        ToolRequest,
        {"call": 2**63, "tool": "t", "arguments": ""},
        "tool_request.call: expected integer from 0",
    ),
    (
        ToolResponse,
        {"content": "", "class": "secret", "untrusted": False, "truncated": False},
        'tool_response.class: expected one of "public", got "secret"',
    ),
    (
        ToolResponse,
        {"content": "", "class": "public", "untrusted": 0, "truncated": False},
        "tool_response.untrusted: expected boolean, got integer",
    ),
    (
        ToolSchema,
        {"name": "a", "description": "b", "parameters": []},
        "tool_schema.parameters: expected object",
    ),
    (
        Timings,
        {"cache_n": 1, "prompt_n": 2, "predicted_n": None},
        "timings.predicted_n: expected integer, got null",
    ),
    (WireError, {"code": "nope", "message": ""}, 'error.code: expected one of "bad_request"'),
    (WireError, {"code": "internal"}, 'error: missing key "message"'),
]


@pytest.mark.parametrize(("cls", "obj", "message"), BAD_BODIES)
def test_strict_decoding_names_the_field(cls: type[Any], obj: Any, message: str) -> None:
    with pytest.raises(BodyError) as info:
        cls.from_json(obj)
    assert message in str(info.value)


BAD_MESSAGES: list[tuple[Any, str]] = [
    ("hi", "message: expected object, got string"),
    ({"content": "x"}, 'message: missing key "role"'),
    (
        {"role": "robot", "content": "x"},
        'message.role: expected one of "system", "user", "tool", "assistant", got "robot"',
    ),
    ({"role": 1, "content": "x"}, "message.role: expected one of"),
    ({"role": "user", "content": None}, "message.content: expected string, got null"),
    ({"role": "system", "content": "x", "name": "n"}, 'unexpected key "name"'),
    ({"role": "assistant"}, 'message: missing key "content"'),
    ({"role": "assistant", "content": 3}, "message.content: expected string or null, got integer"),
    (
        {"role": "assistant", "content": None, "reasoning_content": None},
        "message.reasoning_content: expected string, got null",
    ),
    (
        {"role": "assistant", "content": None, "tool_calls": []},
        "message.tool_calls: expected a non-empty array",
    ),
    (
        {"role": "assistant", "content": None, "tool_calls": {}},
        "message.tool_calls: expected array, got object",
    ),
    (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "fn", "function": {}}],
        },
        'message.tool_calls[0].type: expected "function", got "fn"',
    ),
    (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "n"}}],
        },
        'message.tool_calls[0].function: missing key "arguments"',
    ),
    ({"role": "tool", "content": "x"}, 'message: missing key "tool_call_id"'),
]


@pytest.mark.parametrize(("obj", "message"), BAD_MESSAGES)
def test_strict_message_decoding_names_the_field(obj: Any, message: str) -> None:
    with pytest.raises(BodyError) as info:
        chat_message_from_json(obj)
    assert message in str(info.value)


def make(cls: Any, *args: Any) -> Any:
    """Builds a value with wrong field types on purpose, past the type checker."""
    return cls(*args)


BAD_VALUES: list[tuple[Any, str]] = [
    (ToolRequest(True, "t", ""), "tool_request.call: expected int, got bool"),
    (ToolRequest(-5, "t", ""), "tool_request.call: expected integer from 0"),
    (ToolCall("a", "b", "\ud800"), "tool_call.arguments: lone surrogate at index 0"),
    (
        make(ToolResponse, "x", "public", False, False),
        "tool_response.class: expected ResultClass, got str",
    ),
    (make(ToolSchema, "a", "b", []), "tool_schema.parameters: expected dict, got list"),
    (make(WireError, "internal", "m"), "error.code: expected ErrorCode, got str"),
    (make(AssistantMessage, None, None, [CALL]), "message.tool_calls: expected tuple, got list"),
    (
        make(AssistantMessage, None, None, ("x",)),
        "message.tool_calls[0]: expected ToolCall, got str",
    ),
    (make(SystemMessage, None), "message.content: expected str, got NoneType"),
]


@pytest.mark.parametrize(("value", "message"), BAD_VALUES)
def test_encoding_refuses_values_that_would_not_read_back(value: Any, message: str) -> None:
    with pytest.raises(EncodeError) as info:
        value.to_json()
    assert message in str(info.value)
    # The caller built the value: an edge must not mistake this for the peer's protocol error.
    assert not isinstance(info.value, BodyError)


@pytest.mark.parametrize(
    ("name", "arguments", "target"),
    [
        ("call_tool", '{"name": "write_file", "arguments": {}}', "write_file"),
        ("call_tool", '{"name": 3}', "3"),  # as text, whatever the model sent
        ("call_tool", '{"name": null}', "None"),
        ("call_tool", '{"arguments": {}}', None),  # names nothing
        ("call_tool", '["write_file"]', None),
        ("call_tool", '{"name": "write_file"', None),  # not JSON
        ("read_file", '{"name": "write_file"}', None),  # another tool's name argument
    ],
)
def test_call_tool_target_is_the_tool_a_call_tool_call_names(
    name: str, arguments: str, target: str | None
) -> None:
    assert call_tool_target(name, arguments) == target


@pytest.mark.parametrize(
    ("name", "arguments", "runs"),
    [
        (
            "call_tool",
            '{"name": "write_file", "arguments": {"path": "a"}}',
            ("write_file", {"path": "a"}),
        ),
        ("call_tool", '{"name": 3, "arguments": []}', ("3", {})),  # inner arguments not an object
        ("call_tool", '{"arguments": {"path": "a"}}', ("call_tool", {"path": "a"})),  # no name
        ("call_tool", '["write_file"]', ("call_tool", {})),
        ("read_file", '{"path": "a"}', ("read_file", {"path": "a"})),  # any other call as it is
        ("read_file", '{"path": "a"', ("read_file", {})),  # not JSON
        ("read_file", '"a"', ("read_file", {})),
    ],
)
def test_tool_and_arguments_is_what_a_call_runs_with(
    name: str, arguments: str, runs: tuple[str, dict[str, Any]]
) -> None:
    assert tool_and_arguments(name, arguments) == runs
