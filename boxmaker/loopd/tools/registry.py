"""The tool registry, the core schemas, and how a model's tool call is resolved. [core]

Every session's `tools` array is fixed for the epoch so the prompt cache keeps hitting. By
default it is exactly `CORE_SCHEMAS` (M2b brief section 5); `[tools] core` lists the registry
tools offered there instead of `clock` alone (`core_schemas`: those tools, then find_tool and
call_tool; docs/decisions/core-tools.md):

| Tool        | Answered by      | Does                                                        |
|-------------|------------------|-------------------------------------------------------------|
| `clock`     | the port         | the current time                                            |
| `find_tool` | loopd            | searches the registry's other tools, name and description   |
| `call_tool` | loopd, the port  | runs a registry tool that is not core                       |

The registry lists the tools the port can run, each with its `core` flag; without brokerd it is
`clock` alone (`local_registry`, answered by loopd). Every registry also lists `recall` (issue
21), reached through `call_tool` like any other, or called directly; loopd answers it itself
beside the port (`turn.recall`), since it reads only the session's own log. When every tool
brokerd grants is core, find_tool and call_tool are not offered at all (`core_schemas`), and
recall joins the tools array from the first fold on (`folded_tools`). `find_tool` searches only
the tools that are not core: the core ones are in the tools array already, and
call_tool refuses them, so offering them there would mislead the model.

`resolve` decides what happens to one call, with no I/O: an `Answer` that loopd gives itself
(find_tool's result, or an error that says what was wrong), or a `Dispatch` for the port with the
tool name and the arguments as JSON text. A call that is unknown, not JSON, or does not match its
tool's schema is always an `Answer`: the port never sees it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import orjson

from boxmaker.loopd.tools.schema import check_arguments
from boxmaker.proto import ToolCall, ToolSchema

FIND_TOOL: Final = "find_tool"
CALL_TOOL: Final = "call_tool"

# The brief's exact texts.
FIND_TOOL_FOOTER: Final = "Call it with call_tool."
NO_TOOL_MATCHES: Final = "No tool matches."

CLOCK_SCHEMA: Final = ToolSchema(
    "clock",
    "Returns the current date and time in UTC, as RFC 3339 text.",
    {"type": "object", "properties": {}},
)
FIND_TOOL_SCHEMA: Final = ToolSchema(
    FIND_TOOL,
    "Finds more tools. Searches tool names and descriptions for the query (case-insensitive) "
    "and returns the matching tools' schemas.",
    {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "A word or phrase to look for."}},
        "required": ["query"],
    },
)
CALL_TOOL_SCHEMA: Final = ToolSchema(
    CALL_TOOL,
    "Calls a tool that find_tool found, by its name, with arguments that match its schema.",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The tool's name, as find_tool gave it."},
            "arguments": {"type": "object", "description": "The tool's arguments."},
        },
        "required": ["name", "arguments"],
    },
)
RECALL: Final = "recall"
RECALL_SCHEMA: Final = ToolSchema(
    RECALL,
    "Returns the exact content of a record that a compaction folded out of the conversation, "
    "by its epoch and seq (the section 'Earlier in this conversation' names them).",
    {
        "type": "object",
        "properties": {
            "epoch": {"type": "integer", "description": "The folded epoch, from 0."},
            "seq": {"type": "integer", "description": "The record's sequence number in it."},
        },
        "required": ["epoch", "seq"],
        "additionalProperties": False,
    },
)

# The tools array of every session by default, in this order.
CORE_SCHEMAS: Final = (CLOCK_SCHEMA, FIND_TOOL_SCHEMA, CALL_TOOL_SCHEMA)


def core_schemas(
    core: Iterable[str], known: Iterable[ToolSchema], complete: bool = True
) -> tuple[ToolSchema, ...]:
    """A new session's tools array: the schemas of the tools named in `core` (`[tools] core`),
    in that order, that `known` has (a name it lacks is left out), then find_tool and
    call_tool. `core = ["clock"]` gives CORE_SCHEMAS.

    find_tool and call_tool are left out when `known` is every tool there is besides recall
    (`complete`) and each one is in `core`: a new session has nothing to recall, so there is
    nothing for them to find, and a small model offered them called find_tool instead of the tool
    it needed (issue 40: in the qwen-coder profile they reached only recall; 2 of 26 owner tasks
    failed in them). `folded_tools` offers recall once a fold has left something to recall."""
    by_name = {s.name: s for s in known if s.name != RECALL}
    own = {FIND_TOOL, CALL_TOOL}
    offered = tuple(by_name[n] for n in core if n in by_name and n not in own)
    if complete and {s.name for s in offered} >= set(by_name):
        return offered
    return (*offered, FIND_TOOL_SCHEMA, CALL_TOOL_SCHEMA)


def folded_tools(tools: tuple[ToolSchema, ...]) -> tuple[ToolSchema, ...]:
    """The tools array of the epoch after a fold: recall added where neither find_tool nor recall
    is there to reach it (the earlier section names records only recall returns)."""
    if any(t.name in (FIND_TOOL, RECALL) for t in tools):
        return tools
    return (*tools, RECALL_SCHEMA)


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    schema: ToolSchema
    core: bool  # in every session's tools array and called directly; else reached via call_tool


class Registry:
    """The tools the port can run, in a fixed order.

    A list from outside (brokerd's grants) may name `find_tool` or `call_tool`, or a tool twice:
    those entries are refused, each with a line in `refused` the shell logs as a warning, and the
    rest serve (issue 29.4: before, such a list failed every turn `internal`, while every other
    malformed list degraded to `clock`)."""

    def __init__(self, tools: Iterable[RegisteredTool]) -> None:
        kept: list[RegisteredTool] = []
        refused: list[str] = []
        names: set[str] = set()
        for t in tools:
            name = t.schema.name
            if name in (FIND_TOOL, CALL_TOOL):
                refused.append(f"a tool named {_quoted(name)} is refused: {name} is loopd's own")
            elif name in names:
                refused.append(f"a second tool named {_quoted(name)} is refused: the first serves")
            else:
                names.add(name)
                kept.append(t)
        self.tools = tuple(kept)
        self.refused = tuple(refused)
        self._by_name = {t.schema.name: t for t in self.tools}

    def get(self, name: str) -> RegisteredTool | None:
        return self._by_name.get(name)

    def search(self, query: str) -> tuple[ToolSchema, ...]:
        """The tools that are not core whose name or description contains `query`, ignoring
        case. An empty query matches them all."""
        needle = query.casefold()
        return tuple(
            t.schema
            for t in self.tools
            if not t.core
            and (needle in t.schema.name.casefold() or needle in t.schema.description.casefold())
        )


def local_registry() -> Registry:
    """The registry without brokerd: `clock` (core, answered by loopd: `port.LoopdClock`) and
    `recall` (loopd's own, answered beside the port: `turn.recall`). Nothing else is reachable."""
    return Registry([RegisteredTool(CLOCK_SCHEMA, core=True), RegisteredTool(RECALL_SCHEMA, False)])


def find_tool_answer(registry: Registry, query: str) -> str:
    """find_tool's result: the matching schemas as a JSON array, then the footer; or the miss."""
    found = registry.search(query)
    if not found:
        return NO_TOOL_MATCHES
    return orjson.dumps([s.to_json() for s in found]).decode() + "\n" + FIND_TOOL_FOOTER


# ---- resolving one call --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """loopd answers the call itself; `error` says the content reports a failure."""

    name: str  # the tool the model meant (call_tool's target when it names one)
    content: str
    error: bool


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The port runs `tool` with `arguments` (JSON text of an object that matched the schema)."""

    tool: str
    arguments: str

    @property
    def name(self) -> str:
        return self.tool


Resolution = Answer | Dispatch


def _error(name: str, text: str) -> Answer:
    return Answer(name, f"error: {text}", error=True)


def resolve(call: ToolCall, registry: Registry) -> Resolution:
    """What to do with one tool call, checked against the registry and the tool's schema."""
    if call.name == FIND_TOOL:
        args = check_arguments(call.arguments, FIND_TOOL_SCHEMA.parameters)
        if isinstance(args, str):
            return _error(FIND_TOOL, f"{FIND_TOOL}: {args}")
        return Answer(FIND_TOOL, find_tool_answer(registry, args["query"]), error=False)
    if call.name == CALL_TOOL:
        return _resolve_call_tool(call, registry)
    tool = registry.get(call.name)
    if tool is None:
        core = [t.schema.name for t in registry.tools if t.core]
        if not [t for t in registry.search("") if t.name != RECALL]:  # find_tool not offered
            return _error(
                call.name,
                f"there is no tool named {_quoted(call.name)}. The tools are {', '.join(core)}.",
            )
        names = ", ".join([*core, FIND_TOOL, CALL_TOOL])
        return _error(
            call.name,
            f"there is no tool named {_quoted(call.name)}. The tools are {names}; "
            f"{FIND_TOOL} finds more, and {CALL_TOOL} calls them.",
        )
    if not tool.core and call.name != RECALL:  # recall: also direct, where no call_tool is
        return _error(
            call.name,
            f"{call.name} is not called directly: call it with {CALL_TOOL}, "
            f'{{"name": "{call.name}", "arguments": {{...}}}}.',
        )
    args = check_arguments(call.arguments, tool.schema.parameters)
    if isinstance(args, str):
        return _error(call.name, f"{call.name}: {args}")
    return Dispatch(call.name, call.arguments)


def _resolve_call_tool(call: ToolCall, registry: Registry) -> Resolution:
    args = check_arguments(call.arguments, CALL_TOOL_SCHEMA.parameters)
    if isinstance(args, str):
        return _error(CALL_TOOL, f"{CALL_TOOL}: {args}")
    name: str = args["name"]
    tool = registry.get(name)
    if name in (FIND_TOOL, CALL_TOOL):  # seen: call_tool("find_tool") again and again (issue 40)
        core = ", ".join(t.schema.name for t in registry.tools if t.core)
        return _error(
            name,
            f"{CALL_TOOL}: {name} is not called through {CALL_TOOL}. Call a tool directly: {core}.",
        )
    if tool is None:
        return _error(
            name, f"{CALL_TOOL}: there is no tool named {_quoted(name)}; {FIND_TOOL} lists them."
        )
    if tool.core:
        return _error(name, f"{CALL_TOOL}: {name} is a core tool; call it directly.")
    # The port gets the inner object's JSON text, checked against the target's own schema.
    inner = orjson.dumps(args["arguments"]).decode()
    checked = check_arguments(inner, tool.schema.parameters)
    if isinstance(checked, str):
        return _error(name, f"{name}: {checked}")
    return Dispatch(name, inner)


def _quoted(name: str) -> str:
    return orjson.dumps(name[:64] + ("..." if len(name) > 64 else "")).decode()
