"""brokerd's config: the `[broker]` table, strict (unknown keys refused, bounds). [core]

Two sub-tables hold the limits of the tools that reach out: `[broker.shell]` (the sandbox's,
SHELL_BOUNDS) and `[broker.fetch]` (FETCH_BOUNDS); sandbox.py and tools/fetch.py check their
limits against the same bounds. Relative paths are taken from the config file's folder.
`loopd_uid` and `owner_uid` default to brokerd's own uid (the shell fills them in: this module
does no I/O).

`[broker.chat_approvals]` is the owner's switch for answering approvals from the chat (off when
absent or `enabled = false`; docs/gateway.md): a third socket for gatewayd's uid, and the tools
whose calls may be answered there. `shell` and `note` (the memory file) are refused in the list.
"""

from __future__ import annotations

import posixpath
import tomllib
from dataclasses import dataclass, field
from typing import Any

MAX_MS = 86_400_000  # one day
MAX_BYTES = 1 << 30
MAX_SOCKET_PATH_BYTES = 107  # sun_path less its NUL
MAX_UID = (1 << 32) - 2  # (uid_t)-1 means "no uid"


# Calls of these tools are answered on the box only, whatever the list says (M4 section 8).
BOX_ONLY_TOOLS = {
    "shell": "a command can do anything the sandbox allows",
    "note": "it writes the memory file that every new session reads",
}


class ConfigError(Exception):
    """The config cannot be used; the message names the key and what it must be."""


@dataclass(frozen=True, slots=True)
class ChatApprovals:
    """`[broker.chat_approvals]` when enabled: the socket gatewayd's uid answers on, and the tools
    whose held calls it may answer (yes or no)."""

    socket: str
    gatewayd_uid: int
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    socket: str
    owner_socket: str
    workspace: str
    grants: str
    home: str
    log: str
    loopd_uid: int | None = None
    owner_uid: int | None = None
    approval_timeout_ms: int = 120_000
    result_cap_bytes: int = 16_384
    max_file_bytes: int = 64 * 1024 * 1024
    max_write_bytes: int = 1_000_000  # at most what one frame carries
    max_connections: int = 32  # open at once on each socket, from its one peer uid
    max_held: int = 16  # calls waiting for the owner at once; past it a call is refused
    log_rotate_bytes: int = 16 << 20  # the decision log's file is rotated past it (log.py)
    shell: dict[str, int] = field(default_factory=dict)  # SandboxLimits' fields that were set
    fetch: dict[str, int] = field(default_factory=dict)  # FetchLimits' fields that were set
    # the [mcp] table as read: mcp.config.parse_mcp checks it (cli.py), which imports this module
    mcp: dict[str, Any] = field(default_factory=dict)
    chat: ChatApprovals | None = None  # [broker.chat_approvals], None when off


# [broker.shell]: key -> (minimum, maximum). The defaults are SandboxLimits'.
SHELL_BOUNDS: dict[str, tuple[int, int]] = {
    "timeout_ms": (100, 3_600_000),  # the wall clock, and the most a call's timeout_ms may ask
    "cpu_seconds": (1, 3600),
    "memory_bytes": (64 << 20, 64 << 30),  # RLIMIT_AS, per process
    "processes": (8, 65536),  # RLIMIT_NPROC: a fork bomb stops here
    "file_bytes": (1 << 10, 1 << 40),  # RLIMIT_FSIZE
    "open_files": (16, 65536),
    "output_bytes": (1 << 10, 64 << 20),  # then the command is stopped (the result is capped too)
    "tmp_bytes": (1 << 20, 16 << 30),  # the sandbox's /tmp, a tmpfs
    "shm_bytes": (1 << 20, 16 << 30),  # the sandbox's /dev/shm, a tmpfs (the rest of /dev is ro)
    "write_bytes": (1 << 20, 1 << 40),  # what one call may add to the workspace; then killed
}
# [broker.fetch]: key -> (minimum, maximum). The defaults are FetchLimits'.
FETCH_BOUNDS: dict[str, tuple[int, int]] = {
    "max_bytes": (1 << 10, 1 << 30),  # of the body read; the rest is not read
    "timeout_ms": (100, 600_000),  # the whole fetch, redirects included
    "max_redirects": (0, 20),
}


# key -> (kind, minimum, maximum); a path kind has no bounds but its own.
_PATHS = ("socket", "owner_socket", "workspace", "grants", "home", "log")
_INTS: dict[str, tuple[int, int]] = {
    "loopd_uid": (0, MAX_UID),
    "owner_uid": (0, MAX_UID),
    "approval_timeout_ms": (1, MAX_MS),
    "result_cap_bytes": (256, 1_000_000),  # a result must fit a 1 MiB frame with its escapes
    "max_file_bytes": (1, MAX_BYTES),
    "max_write_bytes": (1, 1_000_000),  # content arrives in one frame
    "max_connections": (1, 4096),  # each holds a thread in brokerd
    "max_held": (1, 1024),  # each holds a second thread, watching loopd's end
    "log_rotate_bytes": (64 << 10, 1 << 30),  # brokerd reads one file of it at start
}


def _path(key: str, value: Any, base: str, table: str = "broker") -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError(f"[{table}] {key}: expected a non-empty path string, got {value!r}")
    full = posixpath.normpath(posixpath.join(base, value))
    if key in ("socket", "owner_socket") and len(full.encode()) > MAX_SOCKET_PATH_BYTES:
        raise ConfigError(
            f"[{table}] {key}: {full} is {len(full.encode())} bytes; a Unix socket path may "
            f"have at most {MAX_SOCKET_PATH_BYTES} (choose a shorter folder)"
        )
    return full


def parse_config(data: bytes, base_dir: str) -> BrokerConfig:
    """The config in `data` (TOML), relative paths taken from `base_dir`.

    Raises:
        ConfigError: not TOML, a table or key brokerd does not know, a missing key, a value of
            the wrong type or out of bounds.
    """
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"not a TOML file: {exc}") from None
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise ConfigError(
            "not a TOML file brokerd reads: arrays or tables nested too deep"
        ) from None
    if extra := sorted(doc.keys() - {"broker", "mcp"}):
        raise ConfigError(
            f"unknown table(s) {', '.join(extra)}; brokerd reads only [broker] and [mcp.<name>]"
        )
    if not isinstance(doc.get("mcp", {}), dict):
        raise ConfigError("[mcp]: expected a table of [mcp.<name>] tables")
    table = doc.get("broker")
    if not isinstance(table, dict):
        raise ConfigError("missing [broker] table")
    if unknown := sorted(table.keys() - {*_PATHS, *_INTS, "shell", "fetch", "chat_approvals"}):
        known = ", ".join(
            [*_PATHS, *_INTS, "[broker.shell]", "[broker.fetch]", "[broker.chat_approvals]"]
        )
        raise ConfigError(f"[broker]: unknown key(s) {', '.join(unknown)} (known: {known})")
    if missing := [k for k in _PATHS if k not in table]:
        raise ConfigError(f"[broker]: missing key(s) {', '.join(missing)}")
    values: dict[str, Any] = {k: _path(k, table[k], base_dir) for k in _PATHS}
    for key, (lo, hi) in _INTS.items():
        if key not in table:
            continue
        value = table[key]
        if type(value) is not int or not lo <= value <= hi:
            raise ConfigError(
                f"[broker] {key}: expected a whole number {lo} to {hi}, got {value!r}"
            )
        values[key] = value
    for name, bounds in (("shell", SHELL_BOUNDS), ("fetch", FETCH_BOUNDS)):
        values[name] = _limits(name, table.get(name, {}), bounds)
    if values["socket"] == values["owner_socket"]:
        raise ConfigError("[broker] socket and owner_socket must be two different paths")
    chat = _chat(table.get("chat_approvals", {}), base_dir)
    if chat is not None and chat.socket in (values["socket"], values["owner_socket"]):
        raise ConfigError(
            "[broker.chat_approvals] socket must be a path of its own (not socket or owner_socket)"
        )
    if chat is not None and chat.gatewayd_uid == values.get("loopd_uid"):
        raise ConfigError(_SAME_UID.format(uid=chat.gatewayd_uid))
    return BrokerConfig(**values, mcp=doc.get("mcp", {}), chat=chat)


_CHAT_KEYS = ("enabled", "socket", "gatewayd_uid", "tools")
_SAME_UID = (
    "[broker.chat_approvals] gatewayd_uid: {uid} is loopd's uid; the chat socket must never "
    "admit loopd, so run gatewayd as a user of its own (docs/operations.md)"
)


def _chat(sub: Any, base: str) -> ChatApprovals | None:
    """The owner's switch: None unless `enabled = true`; then every other key is required."""
    if not isinstance(sub, dict):
        raise ConfigError("[broker.chat_approvals]: expected a table")
    if unknown := sorted(sub.keys() - set(_CHAT_KEYS)):
        raise ConfigError(
            f"[broker.chat_approvals]: unknown key(s) {', '.join(unknown)} "
            f"(known: {', '.join(_CHAT_KEYS)})"
        )
    enabled = sub.get("enabled", False)
    if type(enabled) is not bool:
        raise ConfigError(
            f"[broker.chat_approvals] enabled: expected true or false, got {enabled!r}"
        )
    if not enabled:
        return None
    if missing := [k for k in _CHAT_KEYS[1:] if k not in sub]:
        raise ConfigError(
            f"[broker.chat_approvals]: enabled, so {', '.join(missing)} must be set too"
        )
    socket = _path("socket", sub["socket"], base, "broker.chat_approvals")
    uid = sub["gatewayd_uid"]
    if type(uid) is not int or not 0 <= uid <= MAX_UID:
        raise ConfigError(
            f"[broker.chat_approvals] gatewayd_uid: expected a whole number 0 to {MAX_UID}, "
            f"got {uid!r}"
        )
    tools = sub["tools"]
    if not isinstance(tools, list) or not tools or not all(isinstance(t, str) and t for t in tools):
        raise ConfigError(
            "[broker.chat_approvals] tools: expected a non-empty list of tool names "
            f'(e.g. ["write_file", "edit_file"]), got {tools!r}'
        )
    for name in tools:
        if name in BOX_ONLY_TOOLS:
            raise ConfigError(
                f"[broker.chat_approvals] tools: {name!r} stays box-only ({BOX_ONLY_TOOLS[name]}); "
                "take it out of the list"
            )
    return ChatApprovals(socket, uid, tuple(dict.fromkeys(tools)))


def _limits(name: str, sub: Any, bounds: dict[str, tuple[int, int]]) -> dict[str, int]:
    if not isinstance(sub, dict):
        raise ConfigError(f"[broker.{name}]: expected a table")
    if unknown := sorted(sub.keys() - bounds.keys()):
        raise ConfigError(
            f"[broker.{name}]: unknown key(s) {', '.join(unknown)} (known: {', '.join(bounds)})"
        )
    for key, value in sub.items():
        lo, hi = bounds[key]
        if type(value) is not int or not lo <= value <= hi:
            raise ConfigError(
                f"[broker.{name}] {key}: expected a whole number {lo} to {hi}, got {value!r}"
            )
    return dict(sub)
