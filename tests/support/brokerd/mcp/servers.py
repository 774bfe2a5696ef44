"""The MCP tests' rig: servers configured as an owner would, a manager, a page server that
records its hits. Works as root (the sandbox runs as nobody) and as an ordinary user."""

from __future__ import annotations

import contextlib
import http.server
import os
import pwd
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from boxmaker.brokerd.approvals import Held
from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.config import BrokerConfig
from boxmaker.brokerd.mcp.config import McpServerConfig, parse_mcp
from boxmaker.brokerd.mcp.manager import McpManager
from boxmaker.brokerd.mcp.rows import families
from boxmaker.brokerd.tools.table import BUILTIN, Table
from tests.support.mcp_servers import SYSTEM_PYTHON, python_server, sandbox_python, site_packages

__all__ = ["python_server", "sandbox_python", "site_packages"]  # moved to tests/support

HOSTILE = Path(__file__).with_name("hostile_server.py")


def hostile_server(name: str = "evil", *args: str, **keys: Any) -> dict[str, Any]:
    ro = [str(HOSTILE.parent)]
    return {name: {"command": SYSTEM_PYTHON, "args": [str(HOSTILE), *args], "ro_paths": ro, **keys}}


def sandbox_owned(path: Path) -> None:
    """As root the sandbox runs as nobody, which must own what a server may write."""
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for root, dirs, files in os.walk(path):
            for part in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.lchown(part, nobody.pw_uid, nobody.pw_gid)


@dataclass
class Rig:
    base: Path
    workspace: Path
    logged: list[str] = field(default_factory=list)
    managers: list[McpManager] = field(default_factory=list)

    def manager(
        self, tables: dict[str, Any], own_runtime: bool = False, write_bytes: int | None = None
    ) -> McpManager:
        servers: dict[str, McpServerConfig] = parse_mcp(tables, str(self.base))
        lock = threading.Lock()

        def log(line: str) -> None:
            with lock:
                self.logged.append(line)

        runtime = None if own_runtime else str(self.base / "run")
        quota = {} if write_bytes is None else {"write_bytes": write_bytes}
        m = McpManager(servers, str(self.workspace), log, runtime_dir=runtime, **quota)
        self.managers.append(m)
        return m

    def log_has(self, part: str) -> bool:
        return any(part in line for line in self.logged)


@contextlib.contextmanager
def mcp_rig() -> Iterator[Rig]:
    base = Path(tempfile.mkdtemp(prefix="bkm-", dir="/tmp"))
    os.chmod(base, 0o755)
    (base / "run").mkdir()
    workspace = base / "ws"
    workspace.mkdir()
    rig = Rig(base, workspace)
    try:
        yield rig
    finally:
        for m in rig.managers:
            m.close()
        shutil.rmtree(base, ignore_errors=True)


class Page(http.server.BaseHTTPRequestHandler):
    body = b"<html><body><p>page-3c1d served to the sandbox</p></body></html>"

    def do_GET(self) -> None:
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        if self.path.startswith("/redirect-to/"):
            self.send_response(302)
            self.send_header("Location", "http://" + self.path[len("/redirect-to/") :])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def page_server(address: str) -> Iterator[tuple[int, list[str]]]:
    """A web page on `address` (a loopback address); yields its port and the paths it served."""
    httpd = http.server.ThreadingHTTPServer((address, 0), Page)
    httpd.hits = []  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], httpd.hits  # type: ignore[attr-defined]
    finally:
        httpd.shutdown()
        httpd.server_close()


APPROVAL_MS = 300  # an ask nobody answers is a no after this


def broker_config(rig: Rig, grants: str | bytes, approval_ms: int = APPROVAL_MS) -> BrokerConfig:
    """An in-process Broker's config in the rig's folder, with these grants written."""
    path = rig.base / "grants.toml"
    if isinstance(grants, bytes):
        path.write_bytes(grants)
    else:
        path.write_text(grants)
    return BrokerConfig(
        socket=str(rig.base / "b.sock"),
        owner_socket=str(rig.base / "o.sock"),
        workspace=str(rig.workspace),
        grants=str(path),
        home=str(rig.base / "home"),
        log=str(rig.base / "log" / "decisions.jsonl"),
        approval_timeout_ms=approval_ms,
    )


def broker_for(rig: Rig, servers: dict[str, Any], grants: str) -> Broker:
    config = broker_config(rig, grants)
    return Broker(config, table=Table(BUILTIN, families(rig.manager(servers), lambda _ctx: 0)))


def nobody_answers(_held: Held, _brief: str) -> None:
    pass
