"""A small JSON-Schema subset: enough to check a tool call's arguments before the port sees them.
[core]

Keywords read: `type` (a name or a list of names), `properties`, `required`, `items`, `enum`, and
`additionalProperties: false`. Any other keyword (`description`, `format`, `minimum`, ...) is
ignored, so a schema written for a fuller validator still works here; it is only checked less.
The type names are JSON Schema's: "object", "array", "string", "integer", "number", "boolean",
"null". A boolean is never an integer or a number; an integral float (2.0) is an integer, as JSON
Schema says.

`check_arguments` is what the turn loop calls: the text must be JSON, an object, and match.
Failures are strings for the model to read (`$.text: expected string, got integer`), never
exceptions: a tool call that fails here becomes a ToolResult that says so (tool failures are data).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from boxmaker.proto import json_type

# Messages quote at most this much of a bad value.
_SHOWN_CHARS: Final = 60

_PY_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int, float),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def json_type_name(value: object) -> str:
    """The JSON Schema type name of a decoded JSON value (an integral number is "integer")."""
    if isinstance(value, float) and value.is_integer():
        return "integer"
    return json_type(value)


def _is_type(value: object, name: str) -> bool:
    if name not in _PY_TYPES:
        return True  # an unknown type name constrains nothing (the schema is the tool's word)
    if isinstance(value, bool):
        return name == "boolean"
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _PY_TYPES[name])


def _shown(value: object) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def validate(value: Any, schema: Any, path: str = "$") -> str | None:
    """The first way `value` breaks `schema`, as "path: what", or None when it matches.

    Args:
        value: a decoded JSON value.
        schema: a JSON Schema object (a dict); anything else constrains nothing.
        path: where `value` sits, for the message.
    """
    if not isinstance(schema, dict):
        return None
    wanted = schema.get("type")
    if isinstance(wanted, str):
        wanted = [wanted]
    if isinstance(wanted, list) and wanted and not any(_is_type(value, t) for t in wanted):
        return f"{path}: expected {' or '.join(map(str, wanted))}, got {json_type_name(value)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, option) for option in enum):
        options = ", ".join(_shown(o) for o in enum)
        return f"{path}: expected one of {options}, got {_shown(value)}"
    if isinstance(value, dict):
        return _validate_object(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            if (problem := validate(item, schema["items"], f"{path}[{i}]")) is not None:
                return problem
    return None


def _validate_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> str | None:
    required = schema.get("required")
    for key in required if isinstance(required, list) else ():
        if isinstance(key, str) and key not in value:
            return f"{path}: missing required property {_shown(key)}"
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for key, item in value.items():
        if key in properties:
            if (problem := validate(item, properties[key], f"{path}.{key}")) is not None:
                return problem
        elif schema.get("additionalProperties") is False:
            known = ", ".join(properties) or "none"
            return f"{path}: unexpected property {_shown(key)} (allowed: {known})"
    return None


def _same(a: object, b: object) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return (type(a) is type(b) and a == b) or (_number(a) and _number(b) and a == b)


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def parse_arguments(text: str) -> dict[str, Any] | str:
    """A tool call's arguments text as a JSON object, or what is wrong with it."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return f"the arguments are not JSON ({exc}): {_shown(text)}"
    if not isinstance(value, dict):
        return f"the arguments must be a JSON object, got {json_type_name(value)}"
    return value


def check_arguments(text: str, schema: Any) -> dict[str, Any] | str:
    """The arguments as an object when they are JSON and match `schema`; else what is wrong."""
    value = parse_arguments(text)
    if isinstance(value, str):
        return value
    problem = validate(value, schema)
    return value if problem is None else f"the arguments do not match the tool's schema: {problem}"
