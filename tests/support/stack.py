"""A real llama-server behind a real inferproxy, for the tests that need the real upstream (the
stack rig; the fixtures over it are in tests/loopd/conftest.py).

`Stacks` starts, on first use, one llama-server per mode ("single", "router") on
127.0.0.1, each behind its own `python -m boxmaker.inferproxy` on a Unix socket in a short
temporary folder, and stops them all at the end (the `stacks` fixture holds one per test session;
`stack` is parametrised over the two modes, so a test that takes it runs against both). A server
that cannot be built or started makes the tests that use it fail (a fixture error), never skip.

The servers are what conf/loopd.local.toml describes (the SmolLM2 model, Boxmaker's ChatML tool
template, 2 slots of 2,048 tokens), with a prompt batch of 64 tokens so a prompt of a few hundred
tokens gives several progress events. `Stack.write_config` writes that profile with the stack's
socket and any overrides, so the real-server tests also prove the local profile matches.
"""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from boxmaker._toml import toml_dumps
from boxmaker.loopd.config import Config, load_config
from boxmaker.loopd.llama.client import Client
from tests.support.inferproxy.proxy import start_inferproxy
from tests.support.llama import LlamaServer, Mode, ensure_built
from tests.support.procs import Daemon, short_tmpdir

REPO = Path(__file__).resolve().parents[2]
LOCAL_PROFILE = REPO / "conf" / "loopd.local.toml"
MODES: tuple[Mode, ...] = ("single", "router")
BOUND = 30.0  # seconds for a daemon to start on a loaded 2-core machine
# The proxy's accept bucket (burst 10, refill 2/s) is for retry storms, and is tested in
# tests/inferproxy. Here many short requests come back to back, so it is opened wide.
PROXY_FLAGS = ("--accept-burst", "1000", "--accept-rate", "1000")
# Limits for the tests: short answers, and waits that still leave a loaded machine room.
TEST_INFERENCE: dict[str, Any] = {"max_tokens": 48, "poll_ms": 1000, "control_timeout_ms": 10_000}


def local_profile() -> dict[str, Any]:
    return tomllib.loads(LOCAL_PROFILE.read_text())


def write_local_config(run: Path) -> Path:
    """The local profile as `make run` uses it, with its sockets and home in the `run` folder (the
    e2e and verify tests run the whole stack on it)."""
    text = LOCAL_PROFILE.read_text()
    for name in ("infer.sock", "loop.sock", "home", "broker.sock"):
        old = f'"../run/{name}"'
        assert old in text, f"conf/loopd.local.toml no longer names {old}"
        text = text.replace(old, f'"{run / name}"')
    path = run / "loopd.toml"
    path.write_text(f'{text}\n[baseline]\nsystem = "{REPO / "conf" / "system.md"}"\n')
    return path


class Stack:
    """One llama-server and the inferproxy in front of it."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        built = ensure_built()  # first: a failed build leaves no folder behind
        self.dir = short_tmpdir(f"loopd-{mode}-")
        self.socket = self.dir / "infer.sock"
        self.server = LlamaServer(
            mode=mode,
            ctx=2048,
            slots=2,
            batch=64,
            built=built,
            workdir=self.dir / "llama",
        )
        self.proxy: Daemon | None = None
        self._configs = 0

    @property
    def model_id(self) -> str:
        return self.server.model_id

    def start(self) -> Stack:
        self.server.start()
        self.start_proxy()
        return self

    def start_proxy(self) -> Daemon:
        """Starts inferproxy on `socket` (a stale socket file from a killed one is taken over)."""
        upstream = f"{self.server.host}:{self.server.port}"
        self.proxy = start_inferproxy(self.socket, upstream, *PROXY_FLAGS, bound=BOUND)
        return self.proxy

    def kill_proxy(self) -> None:
        """SIGKILL: no clean-up at all, as when the process dies under a request."""
        assert self.proxy is not None
        self.proxy.kill()
        self.proxy = None

    def stop(self) -> None:
        try:
            if self.proxy is not None:
                self.proxy.stop()
        finally:
            self.server.stop()
            shutil.rmtree(self.dir, ignore_errors=True)

    def config_table(
        self,
        inference: Mapping[str, Any] | None = None,
        expect: Mapping[str, Any] | None = None,
        selftest: Mapping[str, Any] | None = None,
        socket_path: Path | None = None,
    ) -> dict[str, Any]:
        """The local profile, pointed at this stack, with TEST_INFERENCE and the overrides."""
        table = local_profile()
        for section in ("channel", "paths"):  # the profile's run/ folder is not for tests
            table.pop(section, None)
        table.pop("cache", None)  # slot save needs --slot-save-path: tests/loopd/cache sets it
        table["inference"] |= {"socket": str(socket_path or self.socket), "model": self.model_id}
        table["inference"] |= TEST_INFERENCE | dict(inference or {})
        table["expect"] |= dict(expect or {})
        chosen = table.setdefault("selftest", {})
        for key, value in (selftest or {}).items():
            if value is None:
                chosen.pop(key, None)  # back to the config's default
            else:
                chosen[key] = value
        return table

    def write_config(self, **overrides: Any) -> Path:
        """Writes `config_table(**overrides)` to a new file in the stack's folder."""
        self._configs += 1
        path = self.dir / f"loopd-{self._configs}.toml"
        path.write_text(toml_dumps(self.config_table(**overrides)))
        return path

    def config(self, **overrides: Any) -> Config:
        return load_config(self.write_config(**overrides), env={})

    def client(self, **overrides: Any) -> Client:
        return Client(self.config(**overrides).inference)


class Stacks:
    def __init__(self) -> None:
        self._started: dict[str, Stack] = {}

    def get(self, mode: Mode) -> Stack:
        if mode not in self._started:
            stack = Stack(mode)
            try:
                stack.start()
            except BaseException:
                stack.stop()
                raise
            self._started[mode] = stack
        return self._started[mode]

    def stop_all(self) -> None:
        for stack in self._started.values():
            stack.stop()
