"""What the sandbox tests attack: a workspace, canaries beside it, and real listeners that record.

The canaries are world-readable and the sockets world-writable on purpose: if one of them is
reached from `shell`, only the sandbox's mounts and namespaces can have stopped it, not a mode.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from boxmaker.brokerd.sandbox import Sandbox, SandboxLimits

CANARY = "canary-7f3a9c1e-do-not-leak"
PYTHON = "/usr/bin/python3"  # the system's interpreter, visible in the sandbox under /usr


class Listener:
    """A real listening socket on a thread; `seen` holds every connection or datagram it got."""

    def __init__(self, family: int, kind: int, address: object) -> None:
        self.sock = socket.socket(family, kind)
        self.sock.bind(address)  # type: ignore[arg-type]
        if family == socket.AF_UNIX and isinstance(address, str) and address[0] != "\0":
            os.chmod(address, 0o777)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.address = self.sock.getsockname()
        self.seen: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        stream = self.sock.type == socket.SOCK_STREAM
        while not self._stop.is_set():
            try:
                if stream:
                    conn, _ = self.sock.accept()
                    conn.settimeout(0.5)
                    with conn:
                        try:
                            self.seen.append(b"connect:" + conn.recv(4096))
                        except OSError:
                            self.seen.append(b"connect:")
                else:
                    self.seen.append(self.sock.recv(4096))
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@dataclass
class Rig:
    base: Path
    workspace: Path
    outside: Path
    sandbox: Sandbox
    listeners: dict[str, Listener] = field(default_factory=dict)

    def run(self, command: str, timeout_ms: int | None = None) -> str:
        result = self.sandbox.run(command, timeout_ms)
        assert result.refused is None, result.refused
        return result.text

    def canaries(self) -> dict[str, bytes]:
        """Every file outside the workspace, with its bytes: compare before and after."""
        found = {}
        for path in sorted(self.base.rglob("*")):
            if self.workspace in path.parents or path == self.workspace:
                continue
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(self.base))] = path.read_bytes()
            elif not path.is_socket():
                found[str(path.relative_to(self.base))] = b"<dir>" if path.is_dir() else b"?"
        return found

    def nothing_heard(self) -> dict[str, list[bytes]]:
        return {name: lis.seen for name, lis in self.listeners.items() if lis.seen}


def sandbox_uid() -> tuple[int, int] | None:
    import pwd

    if os.geteuid() != 0:
        return None
    nobody = pwd.getpwnam("nobody")
    return nobody.pw_uid, nobody.pw_gid


def make_rig(limits: SandboxLimits | None = None) -> Iterator[Rig]:
    """A base folder (0755, under /tmp so the sandbox's uid can reach it) holding the workspace
    and, beside it, what the sandbox must not reach: a secret, another session's log, the grants
    file, broker.sock and loop.sock, plus listeners on 127.0.0.1 (TCP, UDP) and an abstract one."""
    base = Path(tempfile.mkdtemp(prefix="bx-sandbox-"))
    os.chmod(base, 0o755)
    workspace = base / "workspace"
    workspace.mkdir()
    run_as = sandbox_uid()
    if run_as is not None:
        os.chown(workspace, *run_as)
    outside = base / "outside"
    (outside / "sessions" / "other").mkdir(parents=True)
    (outside / "secret.txt").write_text(f"secret {CANARY}\n")
    (outside / "sessions" / "other" / "log.jsonl").write_text(f'{{"text": "{CANARY}"}}\n')
    (outside / "grants.toml").write_text(f"[shell]\nallow = true # {CANARY}\n")
    for path in outside.rglob("*"):
        os.chmod(path, 0o777 if path.is_dir() else 0o666)
    os.chmod(outside, 0o777)
    rig = Rig(base, workspace, outside, Sandbox(workspace, limits, run_as=run_as))
    rig.listeners = {
        "broker.sock": Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(outside / "broker.sock")),
        "loop.sock": Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(outside / "loop.sock")),
        "tcp": Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
        "udp": Listener(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0)),
        "abstract": Listener(
            socket.AF_UNIX, socket.SOCK_STREAM, f"\0bx-test-{os.getpid()}-{id(base)}"
        ),
    }
    try:
        yield rig
    finally:
        for lis in rig.listeners.values():
            lis.close()
        shutil.rmtree(base, ignore_errors=True)


def processes_with(token: str) -> list[int]:
    """The pids whose command line holds `token` (a command's own text names its processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found
