"""The `[mcp.<name>]` tables of brokerd's config: one MCP server each, strict. [core]

The shape owners know from Codex (`command`, `args`, `env`, `cwd`), plus what the sandbox gives
the server (`workspace`, `ro_paths`, `hosts`), whether its results are trusted, and its limits.
Each key is declared once below with its kind (boxmaker/_config: the walker brokerd's and loopd's
configs use): unknown keys are refused, every number has bounds, and each error is one line naming
the file and the dotted key (`mcp.<name>.<key>`). Relative `ro_paths` are taken from the config
file's folder. This module does no I/O: whether a path exists is the launcher's question.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Annotated

from boxmaker._config.kinds import (
    BOOL,
    Bad,
    ConfigError,
    Ctx,
    Kind,
    choice,
    integer,
    show,
    text,
    type_name,
)
from boxmaker._config.walker import NOT_A_KEY, bounds, build, context
from boxmaker.brokerd.config import SOURCE
from boxmaker.brokerd.mcp.hosts import HostEntry, HostError, parse_host
from boxmaker.brokerd.sandbox import SandboxLimits
from boxmaker.brokerd.targets import SANDBOX_WORKSPACE

# A server's name is the first half of its tools' names (`<server>.<tool>`): no dot in it.
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# brokerd sets these itself (the egress proxy); a server may not point them elsewhere.
RESERVED_ENV = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}
    | {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
)
WORKSPACE_MODES = ("none", "ro", "rw")
MAX_ARGS = 256
MAX_TEXT = 4096  # one argument, one env value, one path

TEXT = text(
    f"a non-empty string without NUL, at most {MAX_TEXT} characters",
    f"[^\\0]{{1,{MAX_TEXT}}}",
)


def _args(value: object, ctx: Ctx) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise Bad(type_name(value))
    if len(value) > MAX_ARGS:
        raise Bad(f"{len(value)} arguments")
    return tuple(str(TEXT.convert(one, ctx)) for one in value)


def _cwd(value: object, ctx: Ctx) -> str:
    cwd = str(TEXT.convert(value, ctx))
    if not cwd.startswith("/"):
        raise Bad(show(cwd))
    return posixpath.normpath(cwd)


def _ro_paths(value: object, ctx: Ctx) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise Bad(type_name(value))
    paths = []
    for raw in value:
        one = str(TEXT.convert(raw, ctx))
        full = posixpath.normpath(posixpath.join(ctx.base_dir, one))
        if full in ("/", "/tmp") or full.split("/")[1] in ("proc", "dev", "workspace"):
            raise Bad(f"{full}, which would cover the sandbox's own mounts")
        paths.append(full)
    return tuple(paths)


def _hosts(value: object, ctx: Ctx) -> tuple[HostEntry, ...]:
    if not isinstance(value, list):
        raise Bad(type_name(value))
    hosts = []
    for raw in value:
        try:
            hosts.append(parse_host(str(TEXT.convert(raw, ctx))))
        except HostError as exc:
            raise Bad(str(exc)) from None
    return tuple(hosts)


def _env(value: object, _ctx: Ctx) -> dict[str, str]:
    if not isinstance(value, dict):
        raise Bad(type_name(value))
    for key, one in value.items():
        if not ENV_NAME.fullmatch(key):
            raise Bad(f"{show(key)}, which is not a variable name")
        if key in RESERVED_ENV:
            raise Bad(f"{key}, which is brokerd's (the egress proxy); use hosts")
        if not isinstance(one, str) or "\0" in one or len(one) > MAX_TEXT:
            raise Bad(f"{key} = {show(one)}")
    return dict(value)


ARGS = Kind(f"a list of at most {MAX_ARGS} arguments, each {TEXT.expected}", _args)
CWD = Kind("an absolute path inside the sandbox (/workspace/...)", _cwd)
RO_PATHS = Kind(
    "a list of paths (relative to the config file's folder), none of /, /tmp, /proc, /dev or "
    "/workspace",
    _ro_paths,
)
HOSTS = Kind("a list of hosts (name, name:port, a.b.c.d[:port], [IPv6][:port])", _hosts)
ENV = Kind(
    f'a table of NAME = "value" (values without NUL, at most {MAX_TEXT} characters; no proxy '
    "variable)",
    _env,
)


def _shell(name: str, unit: str) -> Kind:
    """A sandbox limit: [broker.shell]'s bounds (SandboxLimits), written there once."""
    return integer(*bounds(SandboxLimits, name), unit)


CPU_SECONDS = _shell("cpu_seconds", "seconds")
MEMORY_BYTES = _shell("memory_bytes", "bytes")
PROCESSES = _shell("processes", "tasks")
FILE_BYTES = _shell("file_bytes", "bytes")
OPEN_FILES = _shell("open_files", "descriptors")
TMP_BYTES = _shell("tmp_bytes", "bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServerConfig:
    """One server, `[mcp.<name>]`."""

    command: Annotated[str, TEXT, "the server's program"]
    args: Annotated[tuple[str, ...], ARGS] = ()
    env: Annotated[dict[str, str], ENV] = field(default_factory=dict)
    # inside the sandbox; None: /workspace if given, else /tmp
    cwd: Annotated[str | None, CWD] = None
    workspace: Annotated[str, choice(*WORKSPACE_MODES)] = "none"
    ro_paths: Annotated[tuple[str, ...], RO_PATHS] = ()  # host paths given read-only, same place
    hosts: Annotated[tuple[HostEntry, ...], HOSTS] = ()
    trusted: Annotated[bool, BOOL] = False
    # one tools/call, then the server is restarted
    call_timeout_ms: Annotated[int, integer(100, 3_600_000, "milliseconds")] = 30_000
    # spawn, initialize and the first tools/list
    start_timeout_ms: Annotated[int, integer(100, 600_000, "milliseconds")] = 20_000
    # the text the model reads; the rest is cut
    result_cap_bytes: Annotated[int, integer(256, 1_000_000, "bytes")] = 16_384
    # one JSON-RPC line; past it: restart
    message_cap_bytes: Annotated[int, integer(1 << 10, 64 << 20, "bytes")] = 4 << 20
    # unasked messages between two of ours
    flood_messages: Annotated[int, integer(16, 1_000_000, "messages")] = 1_000
    # the first wait after a death, then doubled
    restart_backoff_ms: Annotated[int, integer(10, 600_000, "milliseconds")] = 500
    restart_backoff_max_ms: Annotated[int, integer(10, 3_600_000, "milliseconds")] = 30_000
    # logged per run of the server, then dropped
    stderr_bytes: Annotated[int, integer(0, 16 << 20, "bytes")] = 64 << 10
    cpu_seconds: Annotated[int, CPU_SECONDS] = 3600  # RLIMIT_CPU: a long-lived process
    memory_bytes: Annotated[int, MEMORY_BYTES] = 4 << 30
    processes: Annotated[int, PROCESSES] = 128
    file_bytes: Annotated[int, FILE_BYTES] = 64 << 20
    open_files: Annotated[int, OPEN_FILES] = 256
    tmp_bytes: Annotated[int, TMP_BYTES] = 64 << 20
    name: str = field(default="", metadata=NOT_A_KEY)  # the table's name, [mcp.<name>]

    def _relations(self) -> Iterator[tuple[str, str]]:
        if self.trusted and self.workspace != "none":  # docs/decisions/mcp-trusted-workspace.md
            yield (
                "trusted",
                f"cannot be true for a server that sees the workspace (workspace = "
                f'"{self.workspace}"): it reads what the model wrote there, so its results '
                'cannot be trusted; drop trusted or set workspace = "none"',
            )
        if self.restart_backoff_max_ms < self.restart_backoff_ms:
            yield ("restart_backoff_max_ms", "must be at least restart_backoff_ms")

    def limit(self, key: str) -> int:
        value = getattr(self, key)
        assert key in LIMITS, f"{key} is no limit"
        assert isinstance(value, int)
        return value

    def sandbox_cwd(self) -> str:
        """Where the server starts in its sandbox: a relative path it is given is read from
        here (launch.py chdirs there; an argument constraint joins the path to it)."""
        return self.cwd or (SANDBOX_WORKSPACE if self.workspace != "none" else "/tmp")


# key -> (minimum, maximum, default): every number key of a server.
LIMITS: dict[str, tuple[int, int, int]] = {
    f.name: (*bounds(McpServerConfig, f.name), f.default)  # type: ignore[misc]
    for f in fields(McpServerConfig)
    if f.name.endswith(("_ms", "_bytes", "_messages", "_seconds", "processes", "_files"))
}


def parse_mcp(table: object, base_dir: str, source: str = SOURCE) -> dict[str, McpServerConfig]:
    """The servers of an `[mcp]` table (`config.mcp` of brokerd's config), by name.

    Raises:
        ConfigError: a server name that cannot prefix a tool's name, an unknown or missing key,
            a value of the wrong type or out of bounds, a host entry that does not parse.
    """
    if not isinstance(table, dict):
        raise ConfigError(
            source, "mcp", f"mcp must be a table of [mcp.<name>] tables, got {type_name(table)}"
        )
    ctx = context(source, base_dir)
    servers = {}
    for name, sub in table.items():
        if not NAME.fullmatch(name):
            raise ConfigError(
                source,
                f"mcp.{name}",
                f"[mcp.{name}]: a server name is a letter then up to 31 letters, digits, _ or - "
                "(it prefixes its tools' names as <server>.<tool>)",
            )
        if not isinstance(sub, dict):
            msg = f"mcp.{name} must be a table ([mcp.{name}]), got {type_name(sub)}"
            raise ConfigError(source, f"mcp.{name}", msg)
        server: McpServerConfig = build(McpServerConfig, sub, ctx, f"mcp.{name}")
        servers[name] = replace(server, name=name)
    return servers
