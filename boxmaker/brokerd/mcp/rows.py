"""MCP tools as rows of brokerd's table of tools (tools/table.py): one Family per server, whose
names are `<server>.<tool>`.

A row's grant kind is ARGS: a rule names the tool, and says allow, ask or deny for every call of
it, or for the calls whose named string arguments meet its `args` constraints (grants.py). The
target is every string argument normalised once, as a workspace path (the server sees the
workspace at /workspace; a relative path is read from its cwd) and as a host (targets.py). A
call whose constrained path runs through a symlink in the workspace is refused before the server
sees it: the grants judged the path as written, and the server would follow the link (the
built-in tools follow none either). Every MCP tool `writes` (a server can
do anything its sandbox lets it: a tainted session asks first) and is `untrusted` unless its
server is `trusted`. Its arguments are checked against the schema the server listed (`check`),
after the table's own parser, which knows only str, int, bool, list and dict arguments: a tool
with another kind of argument (a number, a union of types, a free-form object) is left out, with
a warning. The summary the owner sees is the whole call, its arguments as escaped JSON.

`epoch_of` gives a call's epoch key from its context (brokerd's: its session and its epoch,
since every session counts its epochs from 0): the manager refuses a tool that is not in that
key's list. The names a Family gives are the
server's latest listing (the server is started and listed at the first ask).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from boxmaker.brokerd.mcp.catalog import TOOL_NAME, argument_problem, split_name
from boxmaker.brokerd.mcp.config import McpServerConfig
from boxmaker.brokerd.paths import PathRefused, describe
from boxmaker.brokerd.targets import Fields, string_fields
from boxmaker.brokerd.tools.files import error
from boxmaker.brokerd.tools.kind import (
    Args,
    BadArguments,
    Context,
    GrantKind,
    Target,
    Tool,
    no_always,
)
from boxmaker.brokerd.tools.table import DECIDING, Family, Table
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

if TYPE_CHECKING:  # the manager imports the MCP client, which brokerd loads only when it is used
    from boxmaker.brokerd.mcp.manager import McpManager

# What the table's argument parser can check by type (tools/spec.parse_arguments).
JSON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "array": list,
    "object": dict,
}
NO_ALWAYS = no_always(
    "nothing: an MCP tool is asked about every time (write a rule in grants.toml to allow it)"
)


def argument_types(schema: dict[str, Any]) -> dict[str, type] | str:
    """Each argument's Python type, or why the table cannot check this tool's arguments."""
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return "its properties are not an object"
    types = {}
    for name, prop in properties.items():
        if not TOOL_NAME.fullmatch(name):  # brokerd's refusals name arguments: plain names only
            return f"an argument's name is not 1-64 letters, digits, _ or - ({name[:64]!r})"
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind not in JSON_TYPES:
            return (
                f"its argument {name} is of type {kind!r}; brokerd checks only {list(JSON_TYPES)}"
            )
        types[name] = JSON_TYPES[kind]
    return types


def summary(config: McpServerConfig, name: str, args: Args) -> str:
    """The whole call for the owner: where it runs, what it may reach, every argument escaped."""
    reach = ", ".join(str(h) for h in config.hosts) if config.hosts else "no network"
    trust = "trusted" if config.trusted else "untrusted"
    shown = json.dumps(args, ensure_ascii=True, sort_keys=True)  # no control or bidi character
    return (
        f"call {name} (MCP server {config.name}, sandboxed: workspace {config.workspace}, "
        f"{reach}; its result is {trust}): {shown}"
    )


def row(
    manager: McpManager,
    config: McpServerConfig,
    schema: ToolSchema,
    epoch_of: Callable[[Context], Hashable],
) -> Tool | str:
    """The table's row for one listed tool, or why it has none."""
    types = argument_types(schema.parameters)
    if isinstance(types, str):
        return f"tool {schema.name} left out of the table: {types}"
    strings = frozenset(k for k, t in types.items() if t is str)
    cwd = config.sandbox_cwd()

    def run(ctx: Context, target: Target, args: Args, _class: ResultClass) -> ToolResponse:
        if (why := through_link(ctx, schema.name, target)) is not None:
            return error(why)
        return ctx.capped(manager.call(schema.name, args, epoch_of(ctx)))

    def parse(args: Args) -> Args:
        """The arguments checked against the server's schema; its value is the dict itself."""
        if (why := argument_problem(schema, args)) is not None:
            raise BadArguments(why.removeprefix(f"{schema.name}: "))
        return args

    return Tool(
        schema,
        types,
        run,
        lambda _ctx, _target, args: summary(config, schema.name, args),
        GrantKind.ARGS,
        lambda args, _ws: string_fields(args, strings, cwd),
        writes=True,
        untrusted=not config.trusted,
        always=NO_ALWAYS,
        parse=parse,
        asks_by_default=True,
        strings=strings,
        facts=row_facts(types, schema, cwd, config.trusted, config.workspace),
        reads_all_as=reads_workspace(config.workspace),
        denied_as=reads_workspace(config.workspace),
    )


def reads_workspace(workspace: str) -> tuple[str, ...]:
    """A server that sees the workspace reads all of it, as `shell` does (tools/shell.py):
    while the grants deny read_file or list_dir anything, its calls are never better than ask
    (`reads_all_as`), and a string argument naming a path they deny is denied (`denied_as`)."""
    return () if workspace == "none" else READS_ALL_AS


READS_ALL_AS = ("read_file", "list_dir")


def row_facts(
    types: dict[str, type], schema: ToolSchema, cwd: str, trusted: bool, workspace: str = "none"
) -> dict[str, Any]:
    """What a decision reads of an MCP row, for the request's log line: its arguments' types
    and the required ones (the table's parser), the server's cwd (relative paths), whether it
    writes and whether its answers are untrusted (the taint), and whether it sees the
    workspace (`workspace`: the reads of read_file and list_dir bound it). Not its schema: the
    check against it (`check`) is the one part replay cannot do again."""
    names = {t: n for n, t in JSON_TYPES.items()}
    required = schema.parameters.get("required", [])
    return {
        "types": {k: names[t] for k, t in sorted(types.items())},
        "required": sorted(r for r in required if isinstance(r, str)),
        "cwd": cwd,
        "writes": True,
        "untrusted": not trusted,
        "workspace": workspace,
    }


def replayed_row(name: str, facts: dict[str, Any]) -> Tool | str:
    """The row `brokerd verify` decides an MCP call with, from its request line's facts (what
    row_facts wrote), or why they cannot be one. It runs nothing and checks no schema."""
    types, required, cwd = facts.get("types"), facts.get("required"), facts.get("cwd")
    writes, untrusted = facts.get("writes"), facts.get("untrusted")
    workspace = facts.get("workspace", "none")  # a log from before it was written: none
    if (
        split_name(name) is None
        or facts.keys() - {"workspace"} != {"types", "required", "cwd", "writes", "untrusted"}
        or workspace not in ("none", "ro", "rw")
        or not isinstance(types, dict)
        or any(t not in JSON_TYPES for t in types.values())
        or not isinstance(required, list)
        or any(not isinstance(r, str) for r in required)
        or not isinstance(cwd, str)
        or not cwd.startswith("/")
        or type(writes) is not bool
        or type(untrusted) is not bool
    ):
        return f"the row facts logged for {name} are not what brokerd writes"
    kinds = {k: JSON_TYPES[t] for k, t in types.items()}
    strings = frozenset(k for k, t in kinds.items() if t is str)
    parameters = {"type": "object", "properties": {k: {"type": t} for k, t in types.items()}}
    return Tool(
        ToolSchema(name, "", {**parameters, "required": required}),
        kinds,
        _unlisted,
        lambda _ctx, _target, _args: name,
        GrantKind.ARGS,
        lambda args, _ws: string_fields(args, strings, cwd),
        writes=writes,
        untrusted=untrusted,
        always=NO_ALWAYS,
        asks_by_default=True,
        strings=strings,
        facts=facts,
        reads_all_as=reads_workspace(workspace),
        denied_as=reads_workspace(workspace),
    )


def through_link(ctx: Context, name: str, target: Target) -> str | None:
    """Why the call is refused when an argument a `paths` constraint of `name` names runs
    through a symlink (or anything the workspace's own opens refuse) in the workspace; None
    when none does. A path that does not exist yet is fine: the server creates it."""
    if not isinstance(target, Fields):
        return None
    named = {a.field for r in ctx.rules if r.tool == name for a in r.args if a.paths}
    for field in sorted(named):
        _present, value = target.get(field)
        if value is None or value.path is None:
            continue
        try:
            os.close(ctx.ws.open(value.path, os.O_PATH))
        except PathRefused as exc:
            if str(exc).endswith(describe(FileNotFoundError(errno.ENOENT, ""), "")):
                continue  # not there yet: the server may create it
            return (
                f"refused: {name}'s {field} names {exc}: a grant's path is judged as written, "
                "and the server would follow it; give the path it leads to"
            )
    return None


class ServerRows:
    """One server's Family: its rows built once per listed schema."""

    def __init__(
        self, manager: McpManager, server: str, epoch_of: Callable[[Context], Hashable]
    ) -> None:
        self.manager = manager
        self.config = manager.servers[server].config
        self.epoch_of = epoch_of
        self._rows: dict[str, tuple[ToolSchema, Tool | str]] = {}  # rebuilt when relisted

    def _listed(self) -> dict[str, Tool]:
        rows = {}
        name = self.config.name
        # in a decision, what is listed already; elsewhere, listed now if it never was
        listing = self.manager.listed(name) if DECIDING.get() else self.manager.latest(name)
        for schema in listing:
            cached = self._rows.get(schema.name)
            if cached is None or cached[0] is not schema:
                built = row(self.manager, self.config, schema, self.epoch_of)
                if isinstance(built, str):
                    self.manager.log(f"mcp {self.config.name}: {built}")
                cached = self._rows[schema.name] = (schema, built)
            if isinstance(cached[1], Tool):
                rows[schema.name] = cached[1]
        return rows

    def rows(self, name: str) -> Tool | None:
        return self._listed().get(name)

    def names(self) -> list[str]:
        return list(self._listed())

    def grant_row(self, name: str) -> Tool | None:
        """The row a grant names: the listed one, or before the server was ever listed a row
        that only says how its grants read (grant_only_row), so that brokerd's start and each
        re-read of the grants start no server."""
        if self.config.name in self.manager.tools.latest:
            return self.rows(name)
        return grant_only_row(name)

    def family(self) -> Family:
        return Family(f"{self.config.name}.", self.rows, self.names, self.grant_row, self.prepare)

    def prepare(self) -> None:
        self.manager.latest(self.config.name)


def grant_only_row(name: str) -> Tool | None:
    """For `<server>.<tool>`, a row that says only how its grants read (GrantKind.ARGS, its
    string arguments not known: a rule's `args` are checked against them once listed)."""
    if split_name(name) is None:
        return None
    return Tool(
        ToolSchema(name, "", {"type": "object"}),
        {},
        _unlisted,
        lambda _ctx, _target, _args: name,
        GrantKind.ARGS,
        lambda _args, _ws: "",
        asks_by_default=True,
    )


def _unlisted(_ctx: Context, _target: Target, _args: Args, _class: ResultClass) -> ToolResponse:
    raise AssertionError("a grant's or a replay's row is never run")


class ReplayTable:
    """What `brokerd verify` replays with: brokerd's own rows, and grants of any MCP tool read
    as grant_only_row reads them. It starts no server: ledger.replay decides an MCP call again
    on the row its request line's facts give (replayed_row)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def get(self, name: str) -> Tool | None:
        return self.table.get(name)

    def grant_row(self, name: str) -> Tool | None:
        return self.table.grant_row(name) or grant_only_row(name)

    def grant_names(self) -> list[str]:
        return [*self.table.grant_names(), "<server>.<tool>"]

    def names(self) -> tuple[str, ...]:
        return self.table.names()


def epoch_key(ctx: Context) -> Hashable:
    """What an MCP tool list is frozen by: the call's session and its epoch (every session
    counts its epochs from 0, so the bare number would share one list across sessions)."""
    return (ctx.session, ctx.epoch)


def families(manager: McpManager, epoch_of: Callable[[Context], Hashable]) -> list[Family]:
    """One Family per configured server, for `Table(BUILTIN, families(...))`."""
    return [ServerRows(manager, name, epoch_of).family() for name in manager.servers]
