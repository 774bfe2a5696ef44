"""Tool types: what the model asked for, what a tool looks like, and the tool port's two halves.

`ToolCall` and `ToolSchema` each have two JSON forms. The plain form (`to_json`) is the one in
logs and baseline files: `{"id", "name", "arguments"}` and `{"name", "description",
"parameters"}`. The OpenAI form (`to_openai`) is the one in chat-completions requests:
`{"id", "type": "function", "function": {"name", "arguments"}}` and
`{"type": "function", "function": {...}}`.
"""

import enum
from dataclasses import dataclass, field
from typing import Any, Self

import orjson

from ._codec import (
    BOOL,
    OBJECT,
    STR,
    UINT,
    JsonObj,
    check_keys,
    enum_codec,
    from_obj,
    json_type,
    quote,
    to_obj,
    wire,
    wrong,
)
from .errors import BodyError


class ResultClass(enum.StrEnum):
    """How sensitive a tool result is. M2b's tools all answer `public`; M3's broker adds more."""

    PUBLIC = "public"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of an assistant message.

    `arguments` is the JSON text exactly as the server streamed it: it is never parsed and
    re-serialised here, so replaying a log sends the same bytes back.
    """

    id: str = field(metadata=wire(STR))
    name: str = field(metadata=wire(STR))
    arguments: str = field(metadata=wire(STR))

    def to_json(self) -> JsonObj:
        return to_obj(self, "tool_call")

    @classmethod
    def from_json(cls, obj: object, path: str = "tool_call") -> Self:
        return from_obj(cls, obj, path)

    def to_openai(self) -> JsonObj:
        plain = self.to_json()
        return {
            "id": plain["id"],
            "type": "function",
            "function": {"name": plain["name"], "arguments": plain["arguments"]},
        }

    @classmethod
    def from_openai(cls, obj: object, path: str = "tool_call") -> Self:
        if not isinstance(obj, dict):
            raise wrong(path, "object", obj)
        check_keys(obj, ("id", "type", "function"), path)
        if obj["type"] != "function":
            got = quote(obj["type"]) if isinstance(obj["type"], str) else json_type(obj["type"])
            raise BodyError(f'{path}.type: expected "function", got {got}')
        fn = obj["function"]
        if not isinstance(fn, dict):
            raise wrong(f"{path}.function", "object", fn)
        check_keys(fn, ("name", "arguments"), f"{path}.function")
        return cls(
            id=STR.decode(obj["id"], f"{path}.id"),
            name=STR.decode(fn["name"], f"{path}.function.name"),
            arguments=STR.decode(fn["arguments"], f"{path}.function.arguments"),
        )


def call_tool_target(name: str, arguments: str) -> str | None:
    """The tool a `call_tool` call names (its `name` argument, as text), or None: another tool,
    or arguments that are not a JSON object with a name."""
    if name != "call_tool":
        return None
    args = _json_object(arguments)
    return str(args["name"]) if "name" in args else None


def tool_and_arguments(name: str, arguments: str) -> tuple[str, dict[str, Any]]:
    """The tool a call runs and the arguments it runs with: a `call_tool` call's target and its
    inner `arguments`, any other call as it is. {} for arguments that are not a JSON object."""
    args = _json_object(arguments)
    if name != "call_tool":
        return name, args
    inner = args.get("arguments")
    return str(args.get("name", name)), inner if isinstance(inner, dict) else {}


def _json_object(arguments: str) -> dict[str, Any]:
    """The call's arguments as a JSON object, or {} where they are not one."""
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return args if isinstance(args, dict) else {}


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool as the model sees it. `parameters` is a JSON Schema object, passed through as is."""

    name: str = field(metadata=wire(STR))
    description: str = field(metadata=wire(STR))
    parameters: dict[str, Any] = field(metadata=wire(OBJECT))

    def to_json(self) -> JsonObj:
        return to_obj(self, "tool_schema")

    @classmethod
    def from_json(cls, obj: object, path: str = "tool_schema") -> Self:
        return from_obj(cls, obj, path)

    def to_openai(self) -> JsonObj:
        return {"type": "function", "function": self.to_json()}


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """What the turn loop sends to the tool port.

    `call` is the session's call counter (increasing across turns); `arguments` is JSON text.
    """

    call: int = field(metadata=wire(UINT))
    tool: str = field(metadata=wire(STR))
    arguments: str = field(metadata=wire(STR))

    def to_json(self) -> JsonObj:
        return to_obj(self, "tool_request")

    @classmethod
    def from_json(cls, obj: object, path: str = "tool_request") -> Self:
        return from_obj(cls, obj, path)


@dataclass(frozen=True, slots=True)
class ToolResponse:
    """What the tool port answers. The JSON key of `class_` is `class`."""

    content: str = field(metadata=wire(STR))
    class_: ResultClass = field(metadata=wire(enum_codec(ResultClass), key="class"))
    untrusted: bool = field(metadata=wire(BOOL))
    truncated: bool = field(metadata=wire(BOOL))

    def to_json(self) -> JsonObj:
        return to_obj(self, "tool_response")

    @classmethod
    def from_json(cls, obj: object, path: str = "tool_response") -> Self:
        return from_obj(cls, obj, path)
