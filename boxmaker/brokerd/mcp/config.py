"""The `[mcp.<name>]` tables of brokerd's config: one MCP server each, strict. [core]

The shape owners know from Codex (`command`, `args`, `env`, `cwd`), plus what the sandbox gives
the server (`workspace`, `ro_paths`, `hosts`), whether its results are trusted, and its limits.
Unknown keys are refused, every number has bounds, and each error names the table and the key
(brokerd's shell adds the file). Relative `ro_paths` are taken from the config file's folder.
This module does no I/O: whether a path exists is the launcher's question.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from boxmaker.brokerd.config import SHELL_BOUNDS, ConfigError
from boxmaker.brokerd.mcp.hosts import HostEntry, HostError, parse_host
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

# key -> (minimum, maximum, default). The sandbox's keys share [broker.shell]'s bounds.
LIMITS: dict[str, tuple[int, int, int]] = {
    "call_timeout_ms": (100, 3_600_000, 30_000),  # one tools/call, then the server is restarted
    "start_timeout_ms": (100, 600_000, 20_000),  # spawn, initialize and the first tools/list
    "result_cap_bytes": (256, 1_000_000, 16_384),  # the text the model reads; the rest is cut
    "message_cap_bytes": (1 << 10, 64 << 20, 4 << 20),  # one JSON-RPC line; past it: restart
    "flood_messages": (16, 1_000_000, 1_000),  # unasked messages between two of ours
    "restart_backoff_ms": (10, 600_000, 500),  # the first wait after a death, then doubled
    "restart_backoff_max_ms": (10, 3_600_000, 30_000),
    "stderr_bytes": (0, 16 << 20, 64 << 10),  # logged per run of the server, then dropped
    "cpu_seconds": (*SHELL_BOUNDS["cpu_seconds"], 3600),  # RLIMIT_CPU: a long-lived process
    "memory_bytes": (*SHELL_BOUNDS["memory_bytes"], 4 << 30),
    "processes": (*SHELL_BOUNDS["processes"], 128),
    "file_bytes": (*SHELL_BOUNDS["file_bytes"], 64 << 20),
    "open_files": (*SHELL_BOUNDS["open_files"], 256),
    "tmp_bytes": (*SHELL_BOUNDS["tmp_bytes"], 64 << 20),
}
_STRINGS = ("command", "cwd", "workspace")
_LISTS = ("args", "hosts", "ro_paths")
_KNOWN = (*_STRINGS, *_LISTS, "env", "trusted", *LIMITS)


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One server. `limits` holds every LIMITS key (the defaults filled in)."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None  # inside the sandbox; None: /workspace if given, else /tmp
    workspace: str = "none"
    ro_paths: tuple[str, ...] = ()  # host paths given read-only at the same place
    hosts: tuple[HostEntry, ...] = ()
    trusted: bool = False
    limits: dict[str, int] = field(default_factory=dict)

    def limit(self, key: str) -> int:
        return self.limits.get(key, LIMITS[key][2])

    def sandbox_cwd(self) -> str:
        """Where the server starts in its sandbox: a relative path it is given is read from
        here (launch.py chdirs there; an argument constraint joins the path to it)."""
        return self.cwd or (SANDBOX_WORKSPACE if self.workspace != "none" else "/tmp")


def parse_mcp(table: Any, base_dir: str) -> dict[str, McpServerConfig]:
    """The servers of an `[mcp]` table (`doc.get("mcp", {})` of brokerd's TOML), by name.

    Raises:
        ConfigError: a server name that cannot prefix a tool's name, an unknown or missing key,
            a value of the wrong type or out of bounds, a host entry that does not parse.
    """
    if not isinstance(table, dict):
        raise ConfigError("[mcp]: expected a table of [mcp.<name>] tables")
    servers = {}
    for name, sub in table.items():
        if not NAME.fullmatch(name):
            raise ConfigError(
                f"[mcp.{name}]: a server name is a letter then up to 31 letters, digits, _ or - "
                "(it prefixes its tools' names as <server>.<tool>)"
            )
        servers[name] = _server(name, sub, base_dir)
    return servers


def _server(name: str, sub: Any, base_dir: str) -> McpServerConfig:
    where = f"[mcp.{name}]"
    if not isinstance(sub, dict):
        raise ConfigError(f"{where}: expected a table")
    if unknown := sorted(sub.keys() - set(_KNOWN)):
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_KNOWN)})"
        )
    if "command" not in sub:
        raise ConfigError(f"{where}: missing key command (the server's program)")
    command = _text(where, "command", sub["command"])
    args = tuple(_text(where, "args", a) for a in _list(where, "args", sub.get("args", [])))
    if len(args) > MAX_ARGS:
        raise ConfigError(f"{where} args: at most {MAX_ARGS} arguments")
    workspace = sub.get("workspace", "none")
    if workspace not in WORKSPACE_MODES:
        raise ConfigError(f'{where} workspace: expected "none", "ro" or "rw", got {workspace!r}')
    cwd = None
    if "cwd" in sub:
        cwd = _text(where, "cwd", sub["cwd"])
        if not cwd.startswith("/"):
            raise ConfigError(f"{where} cwd: a path inside the sandbox, absolute (/workspace/...)")
        cwd = posixpath.normpath(cwd)
    ro_paths = []
    for raw in _list(where, "ro_paths", sub.get("ro_paths", [])):
        path = posixpath.normpath(posixpath.join(base_dir, _text(where, "ro_paths", raw)))
        if path in ("/", "/tmp") or path.split("/")[1] in ("proc", "dev", "workspace"):
            raise ConfigError(f"{where} ro_paths: {path} would cover the sandbox's own mounts")
        ro_paths.append(path)
    hosts = []
    for raw in _list(where, "hosts", sub.get("hosts", [])):
        try:
            hosts.append(parse_host(_text(where, "hosts", raw)))
        except HostError as exc:
            raise ConfigError(f"{where} hosts: {exc}") from None
    trusted = sub.get("trusted", False)
    if type(trusted) is not bool:
        raise ConfigError(f"{where} trusted: expected true or false, got {trusted!r}")
    if trusted and workspace != "none":  # docs/decisions/mcp-trusted-workspace.md
        raise ConfigError(
            f'{where} trusted: a server that sees the workspace (workspace = "{workspace}") '
            "reads what the model wrote there, so its results cannot be trusted; drop trusted "
            'or set workspace = "none"'
        )
    return McpServerConfig(
        name=name,
        command=command,
        args=args,
        env=_env(where, sub.get("env", {})),
        cwd=cwd,
        workspace=workspace,
        ro_paths=tuple(ro_paths),
        hosts=tuple(hosts),
        trusted=trusted,
        limits=_limits(where, sub),
    )


def _text(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value or "\0" in value or len(value) > MAX_TEXT:
        raise ConfigError(
            f"{where} {key}: expected a non-empty string without NUL, at most {MAX_TEXT} "
            f"characters, got {value!r}"
        )
    return value


def _list(where: str, key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where} {key}: expected a list of strings, got {value!r}")
    return value


def _env(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f'{where} env: expected a table of NAME = "value"')
    env = {}
    for key, text in value.items():
        if not ENV_NAME.fullmatch(key):
            raise ConfigError(f"{where} env: {key!r} is not a variable name")
        if key in RESERVED_ENV:
            raise ConfigError(f"{where} env: {key} is brokerd's (the egress proxy); use hosts")
        if not isinstance(text, str) or "\0" in text or len(text) > MAX_TEXT:
            raise ConfigError(f"{where} env {key}: expected a string without NUL, got {text!r}")
        env[key] = text
    return env


def _limits(where: str, sub: dict[str, Any]) -> dict[str, int]:
    values = {}
    for key, (lo, hi, default) in LIMITS.items():
        value = sub.get(key, default)
        if type(value) is not int or not lo <= value <= hi:
            raise ConfigError(f"{where} {key}: expected a whole number {lo} to {hi}, got {value!r}")
        values[key] = value
    if values["restart_backoff_max_ms"] < values["restart_backoff_ms"]:
        raise ConfigError(f"{where} restart_backoff_max_ms: must be at least restart_backoff_ms")
    return values
