"""An MCP server installed in this venv, as brokerd's config gives it to its sandbox (the MCP
tests' and the tool-model tests'): the sandbox has /usr but not this checkout's venv, unless given.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import mcp

SYSTEM_PYTHON = "/usr/bin/python3"


def sandbox_python() -> tuple[str, list[str]]:
    """An interpreter of this Python's version the sandbox can run, and what to bind for it:
    /usr is in every sandbox; a Python elsewhere (pyenv under /root) is often not readable by
    the sandbox's uid, so the system's same version is preferred."""
    exe = os.path.realpath(sys.executable)
    if exe.startswith("/usr/"):
        return exe, []
    same = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.path.exists(same):
        return same, []
    return exe, [sys.base_prefix]


def site_packages() -> str:
    """Where the SDK and the servers are installed (this venv's site-packages)."""
    return os.path.dirname(os.path.dirname(mcp.__file__))


def python_server(name: str, module: str, *args: str, **keys: Any) -> dict[str, Any]:
    """The table of a server installed in this venv: its python, its site-packages read-only."""
    python, binds = sandbox_python()
    site = site_packages()
    env = {"PYTHONPATH": site, **keys.pop("env", {})}
    table = {"command": python, "args": ["-m", module, *args], "env": env}
    table["ro_paths"] = [site, *binds, *keys.pop("ro_paths", [])]
    return {name: {**table, **keys}}
