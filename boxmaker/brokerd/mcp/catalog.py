"""MCP tools as brokerd lists them, and their results as brokerd answers them. [core]

Names: `<server>.<tool>`, one rule. The server's name has no dot (config.NAME), so the first dot
splits them; a tool whose own name is not 1-64 letters, digits, `_` or `-` is left out.

Schemas are checked when listed: `inputSchema` must be a valid JSON Schema (its own metaschema)
of `"type": "object"`; a tool that fails is left out, with a warning that says why.

Epochs: a session's baseline (its tools array) never changes inside an epoch. So the catalogue
records each server's latest listing (a `notifications/tools/list_changed` makes the manager list
again) and freezes the whole list the first time an epoch asks for it; that epoch keeps it, and
a call to a tool not in its epoch's list is refused. The next epoch sees the new list.

Results: the text blocks joined (structured content as JSON when there is no text; other blocks
named, not passed on), cut at `result_cap_bytes` on a character boundary, untrusted (the
session is tainted) unless the server is `trusted`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from boxmaker.proto import ToolSchema
from boxmaker.proto.tool import ResultClass, ToolResponse

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_DESCRIPTION = 4096
MAX_SCHEMA_BYTES = 64 << 10


def qualified(server: str, tool: str) -> str:
    return f"{server}.{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """`(server, tool)` of `<server>.<tool>`, or None for a name that is not an MCP tool's."""
    server, dot, tool = name.partition(".")
    return (server, tool) if dot and server and TOOL_NAME.fullmatch(tool) else None


def check_tool(server: str, tool: dict[str, Any]) -> ToolSchema | str:
    """The tool as brokerd lists it, or the warning that says why it is left out."""
    name = tool.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        return f"tool {name!r} left out: a name is 1-64 letters, digits, _ or -"
    schema = tool.get("inputSchema")
    why = schema_problem(schema)
    if why is not None:
        return f"tool {name} left out: its inputSchema {why}"
    description = tool.get("description") or ""
    if not isinstance(description, str):
        return f"tool {name} left out: its description is not a string"
    assert isinstance(schema, dict)
    return ToolSchema(qualified(server, name), description[:MAX_DESCRIPTION], schema)


def schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return "is not an object"
    if schema.get("type") != "object":
        return 'is not of "type": "object"'
    try:
        size = len(orjson.dumps(schema))
    except (TypeError, orjson.JSONEncodeError):
        return "is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"is {size} bytes, over {MAX_SCHEMA_BYTES}"
    from jsonschema import SchemaError  # type: ignore[import-untyped]  # the mcp extra's
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"is not a valid JSON Schema ({exc.message[:200]})"
    return None


def argument_problem(schema: ToolSchema, arguments: Any) -> str | None:
    """None when `arguments` fit the listed schema, else the first error (a result, not a call)."""
    from jsonschema.validators import validator_for  # the mcp extra's, loaded at first use

    validator = validator_for(schema.parameters)(schema.parameters)
    error = next(iter(validator.iter_errors(arguments)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "arguments"
    return f"{schema.name}: {where}: {error.message[:300]}"


class EpochTools:
    """Each server's latest listing, and the list each epoch froze."""

    def __init__(self) -> None:
        self.latest: dict[str, tuple[ToolSchema, ...]] = {}
        self._frozen: dict[int, dict[str, ToolSchema]] = {}

    def record(self, server: str, tools: Iterable[ToolSchema]) -> None:
        self.latest[server] = tuple(tools)

    def is_frozen(self, epoch: int) -> bool:
        return epoch in self._frozen

    def for_epoch(self, epoch: int) -> dict[str, ToolSchema]:
        """The tools of `epoch` by name: frozen from the latest listings at its first ask."""
        if epoch not in self._frozen:
            merged = {t.name: t for tools in self.latest.values() for t in tools}
            self._frozen[epoch] = dict(sorted(merged.items()))
        return self._frozen[epoch]


@dataclass(frozen=True, slots=True)
class Text:
    text: str
    truncated: bool


def result_text(result: dict[str, Any], cap: int) -> Text:
    """The text of a CallToolResult (as JSON), at most `cap` UTF-8 bytes."""
    parts: list[str] = []
    for block in result.get("content") or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            parts.append(f"[{kind or 'unknown'} content left out]")
    structured = result.get("structuredContent")
    if not parts and structured is not None:
        parts.append(orjson.dumps(structured).decode())
    text = "\n".join(parts)
    if result.get("isError"):
        text = f"the tool reported an error: {text}"
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return Text(text, False)
    return Text(data[:cap].decode("utf-8", "ignore"), True)


def to_response(text: Text, *, trusted: bool) -> ToolResponse:
    suffix = "\n[cut at the result cap]" if text.truncated else ""
    return ToolResponse(
        content=text.text + suffix,
        class_=ResultClass.PUBLIC,
        untrusted=not trusted,
        truncated=text.truncated,
    )


def refusal(message: str, untrusted: bool = False) -> ToolResponse:
    """A result brokerd wrote itself: trusted, unless it quotes the server (`untrusted`)."""
    return ToolResponse(message, ResultClass.PUBLIC, untrusted=untrusted, truncated=False)
