"""A real brokerd for the tests: its config, grants and workspace in a fresh folder, the process
started with `python -m boxmaker.brokerd serve`, and clients for its two sockets."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from boxmaker._framed import FramedClient
from boxmaker._toml import toml_dumps
from boxmaker.proto.broker import BROKER_KINDS, OWNER_KINDS
from boxmaker.proto.frame import Frame
from tests.support.procs import Daemon, python_module
from tests.support.serve import BOUND_S as SERVE_BOUND_S
from tests.support.serve import START_LINE, ServeEnv, config_text, serve_env

BOUND_S = 10.0


def grant(tool: str, mode: str = "allow", **keys: list[str]) -> str:
    """One rule of a grants file as an owner writes it: `grant("fetch", hosts=["127.0.0.1"])`."""
    lines = ["", "[[grant]]", f'tool = "{tool}"', f'mode = "{mode}"']
    lines += [f"{key} = {orjson.dumps(value).decode()}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


ALL_ALLOW = "".join(grant(t) for t in ("read_file", "list_dir", "write_file", "edit_file", "note"))


@dataclass
class Rig:
    base: Path
    grants_text: str = ALL_ALLOW
    broker: dict[str, Any] = field(default_factory=dict)
    daemon: Daemon | None = None
    openat2: bool = True
    mcp: dict[str, Any] = field(default_factory=dict)

    @property
    def workspace(self) -> Path:
        return self.base / "ws"

    @property
    def socket(self) -> str:
        return str(self.base / "run" / "broker.sock")

    @property
    def owner_socket(self) -> str:
        return str(self.base / "run" / "owner.sock")

    @property
    def log(self) -> Path:
        return self.base / "state" / "decisions.jsonl"

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def grants(self) -> Path:
        return self.base / "grants.toml"

    def start(self) -> Daemon:
        self.workspace.mkdir(exist_ok=True)
        self.grants.write_text(self.grants_text)
        settled = os.stat(self.grants).st_mtime - 60  # the owner wrote it a while ago (amend.py)
        os.utime(self.grants, (settled, settled))
        table = {
            "socket": self.socket,
            "owner_socket": self.owner_socket,
            "workspace": str(self.workspace),
            "grants": str(self.grants),
            "home": str(self.home),
            "log": str(self.log),
            "approval_timeout_ms": 5000,
            **self.broker,
        }
        doc: dict[str, Any] = {"broker": table}
        if self.mcp:
            doc["mcp"] = self.mcp  # [mcp.<name>] tables (docs/mcp.md)
        (self.base / "brokerd.toml").write_text(toml_dumps(doc))
        env = dict(os.environ)
        if not self.openat2:
            env["BOXMAKER_BROKERD_NO_OPENAT2"] = "1"
        self.daemon = Daemon(
            python_module("boxmaker.brokerd", "serve", "--config", str(self.base / "brokerd.toml")),
            env=env,
        )
        self.daemon.wait_for_line("listening on")
        return self.daemon

    def loopd(self) -> FramedClient:
        return FramedClient(self.socket, BROKER_KINDS, BOUND_S)

    def owner(self) -> FramedClient:
        return FramedClient(self.owner_socket, OWNER_KINDS, BOUND_S)

    def call(
        self, tool: str, args: dict[str, Any] | str, session: str | None = None
    ) -> dict[str, Any]:
        """One call that is not asked about; the result's body. Without a session each call is
        its own (so one read's taint does not reach the next call)."""
        text = args if isinstance(args, str) else orjson.dumps(args).decode()
        conn = self.loopd()
        with conn.sock:
            body = {"tool": tool, "arguments": text, "session": session or secrets.token_hex(4)}
            conn.send("call", body, True)
            frame = conn.recv()
        assert frame is not None
        assert frame.kind == "result", frame
        return frame.body

    def frames(self, conn: FramedClient) -> Iterator[Frame]:
        while (frame := conn.recv()) is not None:
            yield frame
            if frame.final:
                return

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None


def sandbox_workspace(rig: Rig) -> None:
    """The workspace made for `shell`: as root, brokerd's sandbox runs as nobody (RLIMIT_NPROC
    does not hold for root), which must be able to write it."""
    rig.workspace.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(rig.workspace, nobody.pw_uid, nobody.pw_gid)


def short_base() -> Path:
    """A short folder (socket paths stay under 107 bytes), 0755 so that `nobody` can reach it."""
    base = Path(tempfile.mkdtemp(prefix="bk-", dir="/tmp"))
    os.chmod(base, 0o755)
    (base / "run").mkdir(mode=0o755)
    os.chmod(base / "run", 0o755)
    return base


def remove(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def loopd_and_brokerd(grants_text: str) -> Iterator[tuple[ServeEnv, Rig]]:
    """A fake-server loopd environment and a brokerd rig with `grants_text`, both cleaned up."""
    base = short_base()
    rig = Rig(base, grants_text=grants_text)
    try:
        with serve_env() as env:
            yield env, rig
    finally:
        if rig.daemon is not None:
            rig.daemon.kill()
        remove(base)


def serve_loopd(
    env: ServeEnv,
    broker_socket: str | Path,
    tool_ms: int | None = None,
    compact: dict[str, Any] | None = None,
) -> Daemon:
    """`loopd serve` on `env`'s fake server, wired to the brokerd at `broker_socket` (a real one or
    a fake): the one place the tests write that config. loopd's tool timeout and its wait on
    brokerd are both `tool_ms` (loopd's defaults without it); [compact] is off unless given.
    Started, its start line seen, stopped with `env`."""
    tools = f'[tools]\nbroker_socket = "{broker_socket}"\n'
    loop = None
    if tool_ms is not None:
        tools += f"broker_timeout_ms = {tool_ms}\n"
        loop = {"tool_timeout_ms": tool_ms}
    path = env.folder / "loopd.toml"
    path.write_text(config_text(env.folder, loop=loop, compact=compact) + tools)
    daemon = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(path)))
    env.daemons.append(daemon)
    daemon.wait_for_line(START_LINE, SERVE_BOUND_S)
    return daemon
