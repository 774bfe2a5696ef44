"""The rig of the hostile-upstream tests: a hostile server, inferproxy, and the client child.

`Rig(folder)` starts the production chain around the scripted server of
tests/support/loopd/hostile.py: `python -m boxmaker.inferproxy` on a Unix socket in `folder`,
forwarding to the server over TCP, and `python -m tests.support.loopd.hostile_client` with a
loopd.toml whose limits are LIMITS. `run(name, script)` makes one chat through it and returns the
client's outcome (`Result`), measured in the child that ran it. `check_bounds` is what every case
must hold, whatever it ends in.
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.loopd.llama.errors import InferError
from tests.support.client import config_text
from tests.support.inferproxy.proxy import start_inferproxy
from tests.support.loopd.hostile import HostileServer, Script, Served
from tests.support.procs import python_module

REPO = Path(__file__).resolve().parents[3]
PROXY_FLAGS = ("--accept-burst", "1000", "--accept-rate", "1000")
STARTUP_S = 30.0  # daemons on a loaded 2-core machine
LIMITS: dict[str, Any] = {
    "poll_ms": 100,
    "idle_grace_ms": 500,
    "busy_wait_ms": 1000,
    "load_wait_ms": 1000,
    "liveness_ms": 400,
    "control_timeout_ms": 500,
    "max_header_bytes": 4096,
    "max_interim_heads": 4,
    "max_sse_line_bytes": 65_536,
    "max_body_bytes": 65_536,
    "max_content_bytes": 262_144,
    "max_reasoning_bytes": 262_144,
    "max_tool_calls": 16,
    "max_tool_call_bytes": 65_536,
    "max_tokens": 512,
    "thinking_cap": 1024,  # above max_tokens: no reasoning_end call in these cases
}
LIVENESS_S = LIMITS["liveness_ms"] / 1000
# The longest any case may take: the idle grace before a first byte, then the head's liveness and
# the stream's, plus room for a loaded machine.
TIME_BOUND_S = (LIMITS["idle_grace_ms"] + 2 * LIMITS["liveness_ms"]) / 1000 + 1.5
MEMORY_BOUND_KB = 24 * 1024  # what one chat may add to its process's peak RSS
CASE_WAIT_S = 30.0  # the bound on one round trip to the client child, far past TIME_BOUND_S
TAGS = {cls.TAG for cls in InferError.__subclasses__()}


@dataclass
class Result:
    outcome: str  # completion | error | crash
    tag: str | None
    message: str
    elapsed_s: float
    growth_kb: int  # the chat's peak RSS over the child's RSS at the fork
    served: Served


class Rig:
    """The hostile server, inferproxy in front of it, and the client child."""

    def __init__(self, folder: Path) -> None:
        self.server = HostileServer()
        socket_path = folder / "infer.sock"
        self.proxy = start_inferproxy(
            socket_path, self.server.address, *PROXY_FLAGS, bound=STARTUP_S
        )
        config = folder / "loopd.toml"
        config.write_text(config_text(socket_path, **LIMITS))
        self.child = subprocess.Popen(
            python_module("tests.support.loopd.hostile_client", str(config)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert orjson.loads(self._next_line(STARTUP_S)) == {"ready": True}

    def _read(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            self._lines.put(line)
        self._lines.put("")

    def _next_line(self, bound: float) -> str:
        try:
            line = self._lines.get(timeout=bound)
        except queue.Empty:
            raise AssertionError(f"the client child gave no result in {bound:g} s") from None
        assert line, f"the client child exited (code {self.child.poll()})"
        return line

    def run(self, name: str, script: Script) -> Result:
        """One chat against `script`: the client's outcome, and what the server got out."""
        served = self.server.push(name, script)
        assert self.child.stdin is not None
        self.child.stdin.write("chat\n")
        self.child.stdin.flush()
        got = orjson.loads(self._next_line(CASE_WAIT_S))
        assert served.done is not None
        assert served.done.wait(CASE_WAIT_S), f"{name}: the server's script never ended"
        growth = got["rss_peak_kb"] - got["rss_start_kb"] if "rss_start_kb" in got else -1
        return Result(
            got["outcome"], got["tag"], got["message"], got.get("elapsed_s", -1.0), growth, served
        )

    def close(self) -> None:
        try:
            if self.child.stdin is not None:
                self.child.stdin.close()
            self.child.wait(STARTUP_S)
            self.proxy.stop()
        finally:
            self.server.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    folder = Path(tmp_path_factory.mktemp("h", numbered=True))
    short = Path("/tmp") / f"hostile-{folder.name}-{id(folder)}"  # a socket path fits 107 bytes
    short.mkdir()
    the_rig = Rig(short)
    try:
        yield the_rig
    finally:
        try:
            the_rig.close()
        finally:
            shutil.rmtree(short, ignore_errors=True)


def check_bounds(r: Result) -> None:
    """What every case must hold, whatever it ends in."""
    assert r.outcome != "crash", r.message
    assert r.outcome == "completion" or r.tag in TAGS, r
    assert 0 <= r.elapsed_s <= TIME_BOUND_S, f"took {r.elapsed_s:.2f} s: {r}"
    assert 0 <= r.growth_kb <= MEMORY_BOUND_KB, f"the chat took {r.growth_kb} KiB: {r}"
