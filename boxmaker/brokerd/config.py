"""brokerd's config: the `[broker]` table, read by the typed walker (boxmaker/_config). [core]

Every key is declared once below with its kind and bounds, so an unknown key ("did you mean"), a
wrong type or a value out of range is one line naming the file and the dotted key. Relative paths
are taken from the config file's folder. `loopd_uid` and `owner_uid` default to brokerd's own uid
(the shell fills them in: this module does no I/O).

A tool's own keys are `[broker.<tool>]`: the tool's row brings that section (tools/table.py
gathers them) and `parse_config` reads each with the same walker; this module names no tool.
`[mcp.<name>]` tables are kept as read: mcp/config.py reads them (cli.py).

`[broker.chat_approvals]` is the owner's switch for answering approvals from the chat (off when
absent or `enabled = false`; docs/gateway.md): a third socket for gatewayd's uid, and the tools
whose calls may be answered there. `shell` and `note` (the memory file) are refused in the list.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Annotated, Any, TypeVar

from boxmaker._config.kinds import (
    BOOL,
    MAX_BYTES,
    MAX_MS,
    MAX_UID,
    ConfigError,
    Kind,
    clip,
    integer,
    kind,
    list_of,
    path,
    text,
    type_name,
)
from boxmaker._config.walker import NOT_A_KEY, build, context, parse_toml

__all__ = ["BOX_ONLY_TOOLS", "BrokerConfig", "ChatApprovals", "ConfigError", "parse_config"]

SOURCE = "brokerd's config"  # the name errors give when the caller gives none
S = TypeVar("S")

# Calls of these tools are answered on the box only, whatever the list says (M4 section 8).
BOX_ONLY_TOOLS = {
    "shell": "a command can do anything the sandbox allows",
    "note": "it writes the memory file that every new session reads",
}


def _as_str(path_kind: Kind) -> Kind:
    """A path kind whose value is a str (brokerd passes paths to os and to messages as text)."""
    return Kind(
        path_kind.expected,
        lambda v, ctx: str(path_kind.convert(v, ctx)),
        lambda v, ctx: str(path_kind.finish_default(v, ctx)),
    )


PATH = _as_str(path())
SOCKET = _as_str(path(socket=True))
UID = integer(0, MAX_UID, "a uid")
TOOL_NAMES = list_of(
    text(),
    'a non-empty list of tool names (e.g. ["write_file", "edit_file"])',
)


@dataclass(frozen=True, slots=True)
class ChatApprovals:
    """`[broker.chat_approvals]` when enabled: the socket gatewayd's uid answers on, and the tools
    whose held calls it may answer (yes or no)."""

    socket: str
    gatewayd_uid: int
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatSection:
    """`[broker.chat_approvals]` as written: off unless `enabled = true`, then every key is set."""

    enabled: Annotated[bool, BOOL] = False
    socket: Annotated[str | None, SOCKET, "the socket gatewayd answers on"] = None
    gatewayd_uid: Annotated[int | None, UID, "gatewayd's uid"] = None
    tools: Annotated[tuple[str, ...] | None, TOOL_NAMES] = None

    def _relations(self) -> Iterator[tuple[str, str]]:
        if not self.enabled:
            return
        if missing := [k for k in ("socket", "gatewayd_uid", "tools") if getattr(self, k) is None]:
            yield ("enabled", f"is true, so {', '.join(missing)} must be set too")
        for name in self.tools or ():
            if name in BOX_ONLY_TOOLS:
                yield (
                    "tools",
                    f"must not name {name}: it stays box-only ({BOX_ONLY_TOOLS[name]}); "
                    "take it out of the list",
                )

    def approvals(self) -> ChatApprovals | None:
        if not self.enabled:
            return None
        assert self.socket is not None, "_relations requires it"
        assert self.gatewayd_uid is not None, "_relations requires it"
        assert self.tools is not None, "_relations requires it"
        return ChatApprovals(self.socket, self.gatewayd_uid, tuple(dict.fromkeys(self.tools)))


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """`[broker]`: brokerd's own keys, each tool's section (`tools`) and the `[mcp]` table."""

    socket: Annotated[str, SOCKET, "loopd's socket"]
    owner_socket: Annotated[str, SOCKET, "the owner's socket"]
    workspace: Annotated[str, PATH, "the agent's folder"]
    grants: Annotated[str, PATH, "the grants file"]
    home: Annotated[str, PATH, "the memory files' folder"]
    log: Annotated[str, PATH, "the decision log"]
    loopd_uid: Annotated[int | None, UID] = None
    owner_uid: Annotated[int | None, UID] = None
    approval_timeout_ms: Annotated[int, integer(1, MAX_MS, "milliseconds, at most one day")] = (
        120_000
    )
    # a result must fit a 1 MiB frame with its escapes
    result_cap_bytes: Annotated[int, integer(256, 1_000_000, "bytes")] = 16_384
    max_file_bytes: Annotated[int, integer(1, MAX_BYTES, "bytes, at most 1 GiB")] = 64 << 20
    # content arrives in one frame
    max_write_bytes: Annotated[int, integer(1, 1_000_000, "bytes")] = 1_000_000
    # open at once on each socket, from its one peer uid; each holds a thread in brokerd
    max_connections: Annotated[int, integer(1, 4096, "connections")] = 32
    # calls waiting for the owner at once (each holds a second thread); past it one is refused
    max_held: Annotated[int, integer(1, 1024, "calls")] = 16
    # the decision log's file is rotated past it (log.py); brokerd reads one file of it at start
    log_rotate_bytes: Annotated[int, integer(64 << 10, 1 << 30, "bytes")] = 16 << 20
    chat_approvals: ChatSection = field(default_factory=ChatSection)
    # each tool's [broker.<tool>] section as read (a tool absent here takes its defaults)
    tools: Mapping[str, object] = field(default_factory=dict, metadata=NOT_A_KEY)
    # the [mcp] table as read: mcp.config.parse_mcp checks it (cli.py)
    mcp: Mapping[str, Any] = field(default_factory=dict, metadata=NOT_A_KEY)

    @property
    def chat(self) -> ChatApprovals | None:
        """[broker.chat_approvals], None when off."""
        return self.chat_approvals.approvals()

    def section(self, name: str, cls: type[S]) -> S:
        """The `[broker.<name>]` section of a tool, its defaults when the file has none."""
        got = self.tools.get(name)
        if got is None:
            return cls()
        assert isinstance(got, cls), f"[broker.{name}] was read as {type(got).__name__}"
        return got

    def _relations(self) -> Iterator[tuple[str, str]]:
        if self.socket == self.owner_socket:
            yield ("owner_socket", "and socket must be two different paths")
        chat = self.chat_approvals
        if chat.enabled and chat.socket in (self.socket, self.owner_socket):
            yield (
                "broker.chat_approvals.socket",
                "must be a path of its own (not socket or owner_socket)",
            )
        if chat.enabled and chat.gatewayd_uid is not None and chat.gatewayd_uid == self.loopd_uid:
            yield (
                "broker.chat_approvals.gatewayd_uid",
                f"= {chat.gatewayd_uid} is loopd's uid; the chat socket must never admit loopd, "
                "so run gatewayd as a user of its own (docs/operations.md)",
            )


MCP_TABLES = kind("a table of [mcp.<name>] tables", (dict,))


@dataclass(frozen=True, slots=True, kw_only=True)
class _File:
    broker: BrokerConfig
    mcp: Annotated[dict[str, Any], MCP_TABLES] = field(default_factory=dict)


NO_SECTIONS: Mapping[str, type] = MappingProxyType({})


def parse_config(
    data: bytes, base_dir: str, sections: Mapping[str, type] = NO_SECTIONS, source: str = SOURCE
) -> BrokerConfig:
    """The config in `data` (TOML), relative paths taken from `base_dir`; `sections` are the
    tools' own sub-tables of [broker] (name -> section class: tools/table.Table.sections()).

    Raises:
        ConfigError: not TOML, a table or key brokerd does not know, a missing key, a value of
            the wrong type or out of bounds; its message starts with `source`.
    """
    try:
        doc = parse_toml(data.decode("utf-8"), source)
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (byte {exc.start})") from None
    ctx = context(source, base_dir)
    table = doc.get("broker")
    tools: dict[str, object] = {}
    if isinstance(table, dict):
        _known_sections(table, sections, source)
    if isinstance(table, dict) and (own := table.keys() & sections.keys()):
        table = dict(table)
        for name in sorted(own):
            sub = table.pop(name)
            if not isinstance(sub, dict):
                msg = f"broker.{name} must be a table ([broker.{name}]), got {type_name(sub)}"
                raise ConfigError(source, f"broker.{name}", msg)
            tools[name] = build(sections[name], sub, ctx, f"broker.{name}")
        doc = {**doc, "broker": table}
    read: _File = build(_File, doc, ctx)
    return replace(read.broker, tools=MappingProxyType(tools), mcp=read.mcp)


def _known_sections(table: Mapping[str, object], sections: Mapping[str, type], source: str) -> None:
    """An unknown [broker.<name>] names the sections there are (the walker knows brokerd's own
    keys only, not the tools')."""
    own = {f.name for f in fields(BrokerConfig)}
    for name, value in table.items():
        if isinstance(value, dict) and name not in own and name not in sections:
            known = ["chat_approvals", *sections]
            close = difflib.get_close_matches(name, known, n=1) if len(name) <= 80 else []
            hint = f"did you mean [broker.{close[0]}]? " if close else ""
            listed = ", ".join(f"[broker.{k}]" for k in known)
            msg = f"unknown section [broker.{clip(name)}]; {hint}brokerd's sections: {listed}"
            raise ConfigError(source, f"broker.{clip(name)}", msg)
