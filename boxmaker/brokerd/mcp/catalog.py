"""MCP tools as brokerd lists them, and their results as brokerd answers them. [core]

Names: `<server>.<tool>`, one rule. The server's name has no dot (config.NAME), so the first dot
splits them; a tool whose own name is not 1-64 letters, digits, `_` or `-` is left out.

Schemas are checked when listed: `inputSchema` must be a valid JSON Schema (its own metaschema)
of `"type": "object"`, at most MAX_SCHEMA_BYTES and MAX_SCHEMA_DEPTH deep, whose every `$ref`
(`$dynamicRef`, `$recursiveRef`) is local (`#...`); a tool that fails is left out, with a warning
that says why. A call's arguments are checked against it with nothing retrieved (a registry that
refuses every URI: only the schema's own `#...` resolves), none of the server's regular
expressions run (`pattern`, `patternProperties`: one search can take forever), no quadratic
`uniqueItems`, and a budget of keyword evaluations (nested `anyOf`s through local `$ref`s grow
as 2^depth): whatever the schema, the check ends soon, and any failure of it is a refusal
(docs/decisions/mcp-untrusted-input.md).

Epochs: a session's baseline (its tools array) never changes inside an epoch. So the catalogue
records each server's latest listing (a `notifications/tools/list_changed` makes the manager list
again) and freezes each server's listing the first time a (session, epoch) asks while it is
listed; that epoch of that session keeps it, and a call to a tool not in its list is refused.
The next epoch sees the new list; another session's epoch of the same number has its own.

Results: the text blocks joined (structured content as JSON when there is no text; other blocks
named, not passed on), cut at `result_cap_bytes` on a character boundary, untrusted (the
session is tainted) unless the server is `trusted`.
"""

from __future__ import annotations

import contextvars
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from boxmaker.proto import ToolSchema
from boxmaker.proto.tool import ResultClass, ToolResponse

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_DESCRIPTION = 4096
MAX_SCHEMA_BYTES = 64 << 10
MAX_SCHEMA_DEPTH = 32  # objects and arrays nested; real servers' schemas are a few deep
MAX_ARGUMENT_DEPTH = 32  # the same for a call's arguments: the check recurses per level
CHECK_BUDGET = 20_000  # keyword evaluations per check: well under a second on a slow core
REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
MAX_FROZEN = 4096  # (session, epoch) lists kept


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
    if nesting(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        return f"is nested over {MAX_SCHEMA_DEPTH} deep"
    try:
        size = len(orjson.dumps(schema))
    except (TypeError, orjson.JSONEncodeError):
        return "is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"is {size} bytes, over {MAX_SCHEMA_BYTES}"
    if (ref := remote_ref(schema)) is not None:
        return f"has a $ref that is not local ({ref[:100]!r}): brokerd retrieves nothing"
    from jsonschema import SchemaError  # type: ignore[import-untyped]  # the mcp extra's
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"is not a valid JSON Schema ({exc.message[:200]})"
    except Exception as exc:  # the library on untrusted input: whatever it raises is a no
        return f"could not be checked ({type(exc).__name__})"
    return None


def nesting(value: Any, bound: int) -> int:
    """How deep objects and arrays nest in `value` (walked without recursion), or bound + 1
    once past `bound`."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > bound:
            return bound + 1
        stack.extend((c, depth + 1) for c in children)
    return deepest


def remote_ref(schema: Any) -> str | None:
    """The first `$ref` (`$dynamicRef`, `$recursiveRef`) anywhere in `schema` that is not
    local (`#...`), or None. A key of that name with a non-string value (a property named
    `$ref`) names no reference."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in REF_KEYS:
                ref = item.get(key)
                if isinstance(ref, str) and not ref.startswith("#"):
                    return ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _retrieve_nothing(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource  # the mcp extra's, as jsonschema is

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


def nothing_retrieved() -> Any:
    """A registry in which only the schema's own resources (and the metaschemas jsonschema
    holds) resolve: every retrieval is refused."""
    from referencing import Registry

    return Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]


class OverBudget(Exception):
    """The check of one call's arguments took more than CHECK_BUDGET keyword evaluations."""


_budget: contextvars.ContextVar[list[int]] = contextvars.ContextVar("budget")  # steps left


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        left = _budget.get()
        left[0] -= 1
        if left[0] < 0:
            raise OverBudget
        return keyword(*args)

    return run


def _skipped(*_args: Any) -> None:
    return None


def _checker(schema: dict[str, Any]) -> Any:
    """The validator class for `schema`, every keyword counted, the regular expressions and
    uniqueItems not run; `additionalProperties` where `patternProperties` is there, and
    `unevaluatedProperties`, not run either (both would run the patterns)."""
    from jsonschema.validators import extend, validator_for

    base = validator_for(schema)
    keywords = dict(base.VALIDATORS)
    aP = keywords.get("additionalProperties")

    def additional(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if aP is None or "patternProperties" in schema:
            return None
        return aP(validator, value, instance, schema)

    keywords.update(
        {
            "pattern": _skipped,
            "patternProperties": _skipped,
            "uniqueItems": _skipped,
            "unevaluatedProperties": _skipped,
            "additionalProperties": additional,
        }
    )
    return extend(base, {k: _counted(v) for k, v in keywords.items() if v is not None})


def argument_problem(schema: ToolSchema, arguments: Any) -> str | None:
    """None when `arguments` fit the listed schema, else the first error (a result, not a
    call). Nothing retrieved, bounded; any failure of the check is a refusal that says so."""
    if nesting(arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        return f"{schema.name}: arguments: nested over {MAX_ARGUMENT_DEPTH} deep"
    _budget.set([CHECK_BUDGET])
    try:
        validator = _checker(schema.parameters)(schema.parameters, registry=nothing_retrieved())
        error = next(iter(validator.iter_errors(arguments)), None)
    except OverBudget:
        return (
            f"{schema.name}: arguments: its schema takes over {CHECK_BUDGET} steps to check; "
            "brokerd refuses the call"
        )
    except (Exception, RecursionError) as exc:  # a schema brokerd cannot check: a refusal
        return f"{schema.name}: arguments: its schema could not be checked ({type(exc).__name__})"
    if error is None:
        return None
    return f"{schema.name}: {_where(error.absolute_path)}: {_what(error)}"


def _where(path: Iterable[Any]) -> str:
    """The failing argument's path, its names shown only when they are plain names."""
    parts = [str(p) for p in path]
    return "/".join(parts) if all(TOOL_NAME.fullmatch(p) for p in parts) and parts else "arguments"


def _what(error: Any) -> str:
    """What failed, in brokerd's words only: the keyword, and for `type` the JSON type (the
    metaschema allows only its seven names). Never the schema's values (an `enum`, a
    `description`, a `const`): they are the server's words, and a refusal is brokerd's."""
    if error.validator == "type":
        want = (
            error.validator_value
            if isinstance(error.validator_value, list)
            else [error.validator_value]
        )
        return "is not of type " + " or ".join(repr(str(w)) for w in want)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [r for r in error.validator_value if r not in error.instance]
        if missing and isinstance(missing[0], str) and TOOL_NAME.fullmatch(missing[0]):
            return f"{missing[0]!r} is a required property"
        return "lacks an argument its schema requires (see the tool's schema)"
    return f"does not meet its schema's {str(error.validator)!r} (see the tool's schema)"


class EpochTools:
    """Each server's latest listing, and what each epoch froze of them, keyed by (session,
    epoch) as brokerd gives it (every session counts its epochs from 0). An epoch freezes a
    server's listing the first time it asks while that server is listed: a server that lists
    again (tools/list_changed) changes nothing in an epoch that froze it, and one first listed
    later joins at the epoch's next ask (no call waits for another server's start). The last
    MAX_FROZEN keys are kept: an older one freezes again from the latest listings."""

    def __init__(self) -> None:
        self.latest: dict[str, tuple[ToolSchema, ...]] = {}
        self._frozen: OrderedDict[Hashable, dict[str, tuple[ToolSchema, ...]]] = OrderedDict()

    def record(self, server: str, tools: Iterable[ToolSchema]) -> None:
        self.latest[server] = tuple(tools)

    def is_frozen(self, epoch: Hashable) -> bool:
        return epoch in self._frozen

    def for_epoch(self, epoch: Hashable) -> dict[str, ToolSchema]:
        """The tools of `epoch` by name: each server's as the epoch first saw it listed."""
        frozen = self._frozen.setdefault(epoch, {})
        self._frozen.move_to_end(epoch)
        while len(self._frozen) > MAX_FROZEN:
            self._frozen.popitem(last=False)
        for server, tools in list(self.latest.items()):
            frozen.setdefault(server, tools)
        merged = {t.name: t for tools in frozen.values() for t in tools}
        return dict(sorted(merged.items()))


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
