"""The command line that starts one MCP server in `shell`'s sandbox.

It is sandbox.py's own argv (prlimit's limits, bwrap's namespaces, /usr and a few /etc files
read-only, a private /proc, /dev and /tmp, the root read-only, a clean environment) with four
changes, all made where the workspace would be bound: the workspace as the server's config says
(`none`: not there at all; `ro`; `rw`), its `ro_paths` read-only at the same place, the egress
proxy's socket at EGRESS_SOCKET when it has `hosts`, and the server's program instead of
`/bin/sh -c`. A server with `hosts` runs under bridge.py (on the system's python3) with
HTTP(S)_PROXY set to the bridge's port; without `hosts` nothing is there to reach.
"""

from __future__ import annotations

from pathlib import Path

from boxmaker.brokerd.mcp.config import McpServerConfig
from boxmaker.brokerd.sandbox import MOUNT_POINT, Sandbox, SandboxLimits

EGRESS_SOCKET = "/run/egress.sock"
PROXY_PORT = 3128  # in the sandbox's own network namespace: no other process shares it
SYSTEM_PYTHON = "/usr/bin/python3"  # the bridge's interpreter, visible under /usr
BRIDGE_SOURCE = Path(__file__).with_name("bridge.py")
_LIMIT_KEYS = ("cpu_seconds", "memory_bytes", "processes", "file_bytes", "open_files", "tmp_bytes")


class LaunchError(Exception):
    """The server cannot be started as configured; the message says why."""


def sandbox_for(config: McpServerConfig, workspace: str) -> Sandbox:
    limits = SandboxLimits(**{key: config.limit(key) for key in _LIMIT_KEYS})
    return Sandbox(workspace, limits)


def server_argv(config: McpServerConfig, sandbox: Sandbox, egress_path: str | None) -> list[str]:
    """The whole argv; `egress_path` is the host side of the proxy's socket (with `hosts`)."""
    if sandbox.bwrap is None or sandbox.prlimit is None:
        raise LaunchError("bubblewrap (bwrap) and prlimit are needed to sandbox MCP servers")
    for path in config.ro_paths:
        if not Path(path).exists():
            raise LaunchError(f"ro_paths: {path} does not exist")
    marker = "\0mcp\0"  # the shell command argv() ends with; replaced by the server's program
    full = sandbox.argv(marker)
    if full[-3:] != ["/bin/sh", "-c", marker] or sandbox.bwrap not in full:
        raise LaunchError("sandbox.argv no longer ends in /bin/sh -c: launch.py must follow it")
    # bwrap's options end at the first "--" after it; what follows up to /bin/sh (an inner
    # prlimit, say) stays in front of the server's program.
    end = full.index("--", full.index(sandbox.bwrap))
    base, inner = full[:end], full[end + 1 : -3]
    bind = ["--bind", str(sandbox.workspace), MOUNT_POINT, "--chdir", MOUNT_POINT]
    at = _find(base, bind)
    if at < 0:
        raise LaunchError("sandbox.argv no longer binds the workspace as launch.py expects")
    mounts: list[str] = []
    if config.workspace == "rw":
        mounts += ["--bind", str(sandbox.workspace), MOUNT_POINT]
    elif config.workspace == "ro":
        mounts += ["--ro-bind", str(sandbox.workspace), MOUNT_POINT]
    for path in config.ro_paths:
        mounts += ["--ro-bind", path, path]
    if config.hosts:
        if egress_path is None:
            raise LaunchError("a server with hosts needs its egress proxy's socket")
        if not Path(SYSTEM_PYTHON).exists():
            raise LaunchError(f"a server with hosts needs {SYSTEM_PYTHON} for its bridge")
        mounts += ["--bind", egress_path, EGRESS_SOCKET]
    mounts += ["--chdir", config.sandbox_cwd()]
    args = base[:at] + mounts + base[at + len(bind) :]
    env = dict(config.env)
    program = [config.command, *config.args]
    if config.hosts:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[key] = proxy
        bridge = BRIDGE_SOURCE.read_text(encoding="utf-8")
        program = [
            SYSTEM_PYTHON,
            "-I",
            "-c",
            bridge,
            EGRESS_SOCKET,
            str(PROXY_PORT),
            "--",
            *program,
        ]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return [*args, "--", *inner, *program]


def _find(args: list[str], part: list[str]) -> int:
    for i in range(len(args) - len(part) + 1):
        if args[i : i + len(part)] == part:
            return i
    return -1
