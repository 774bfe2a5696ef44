"""The stack `make verify-device` checks: supervisord with inferproxy and `loopd serve` (and, with
no upstream given, the local llama-server `make run` uses), in a temporary run folder.

Nothing of a running `make run` is touched: the run folder is new (under /tmp: socket paths stay
short), the local llama-server gets a free port, and the sessions live in the run folder's home.
loopd's config is the owner's (or the local profile) with its sockets, home and system prompt
rewritten: loopd reaches inferproxy through a Tee (tee.py) that keeps every request.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from boxmaker._toml import toml_dumps
from boxmaker.loopd.config import Config, load_config
from boxmaker.verify.programs import gave_up
from boxmaker.verify.tee import Tee

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf" / "supervisord.conf"
LOCAL_PROFILE = REPO / "conf" / "loopd.local.toml"
BIN = Path(sys.executable).parent
CACHE = Path(os.environ.get("BOXMAKER_CACHE") or Path.home() / ".cache" / "boxmaker")
DEFAULT_MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
START_BOUND = 180.0  # seconds: llama-server loads its model, loopd passes its self-test
# The folders conf/ names under $BOXMAKER_RUN that nothing else creates (scripts/run.sh makes the
# same; tests/verify/test_folders.py holds conf/ to it): the includes, loopd's home (0700), and
# llama-server's --slot-save-path, which the server refuses when it is missing.
RUN_FOLDERS = ("supervisord.d", "home", "slots")


class StackError(Exception):
    """The stack could not be started or driven: one line, naming the log to read."""


def wait_for(cond: Callable[[], bool], what: str, timeout: float, hint: str = "") -> None:
    """Polls `cond` every 0.2 s until it holds; StackError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise StackError(f"no {what} after {timeout:g} s{hint}")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def healthy(host: str, port: int) -> bool:
    try:
        conn = http.client.HTTPConnection(host, port, timeout=2)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


class Stack:
    """supervisord and its programs in `run`, loopd's config rewritten into it."""

    def __init__(self, config: Path | None, upstream: str | None, model: Path | None) -> None:
        self.source = config or LOCAL_PROFILE
        self.upstream = upstream
        self.model = model
        self.run = Path(tempfile.mkdtemp(prefix="bx-vd-", dir="/tmp"))
        self.home = self.run / "home"
        self.loop_sock = self.run / "loop.sock"
        self.infer_sock = self.run / "infer.sock"
        self.tee = Tee(self.run / "tee.sock", self.infer_sock)
        self.env: dict[str, str] = {}
        self.daemon: subprocess.Popen[bytes] | None = None
        self.config_path = self.run / "loopd.toml"
        self.table: dict[str, Any] = {}

    # --- set-up ----------------------------------------------------------------------------------

    def start(self) -> None:
        for name in RUN_FOLDERS:
            (self.run / name).mkdir(mode=0o700)
        env = dict(os.environ, BOXMAKER_RUN=str(self.run), BOXMAKER_PYTHON=sys.executable)
        env.pop("BOXMAKER_SOCKET", None)
        if self.upstream:
            env["BOXMAKER_UPSTREAM"] = self.upstream
        else:
            port = free_port()
            env |= self._local_llama(port)
            env["BOXMAKER_UPSTREAM"] = f"127.0.0.1:{port}"
        self.table = self._rewrite(load_config(self.source))
        self.config_path.write_text(toml_dumps(self.table))
        env["BOXMAKER_LOOPD_CONFIG"] = str(self.config_path)
        self.env = env
        self.daemon = subprocess.Popen(
            [str(BIN / "supervisord"), "-n", "-c", str(CONF)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # Each wait also ends, at once, when supervisord has given up on a program.
        wait_for(self.watched(self.infer_sock.exists), "inferproxy socket", START_BOUND,
                 self.see("inferproxy"))  # fmt: skip
        if not self.upstream:
            host, _, port_text = env["BOXMAKER_UPSTREAM"].rpartition(":")
            wait_for(self.watched(lambda: healthy(host, int(port_text))), "llama-server /health",
                     START_BOUND, self.see("llama-server"))  # fmt: skip

    def watched(self, cond: Callable[[], bool]) -> Callable[[], bool]:
        """`cond`, raising StackError first if supervisord gave up on a program (one line: the
        program, its state, the last lines of its log)."""

        def check() -> bool:
            if self.daemon is not None and self.daemon.poll() is not None:
                raise StackError(f"supervisord exited {self.daemon.returncode}"
                                 f"{self.see('supervisord')}")  # fmt: skip
            if (line := gave_up(self.run)) is not None:
                raise StackError(line)
            return cond()

        return check

    def _local_llama(self, port: int) -> dict[str, str]:
        """The local llama-server's program and environment (as scripts/run.sh sets them)."""
        built = subprocess.run(
            ["bash", str(REPO / "scripts" / "build_llama_server.sh")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if built.returncode != 0:
            tail = " ".join(built.stderr.strip().splitlines()[-1:])
            raise StackError(f"no llama-server that can serve on this machine: {tail}")
        llama_home = Path(built.stdout.strip().splitlines()[-1])
        model = self.model or DEFAULT_MODEL
        if not model.is_file():
            raise StackError(f"MODEL={model}: no such file")
        shutil.copy(REPO / "conf" / "programs" / "llama-server.conf", self.run / "supervisord.d")
        return {
            "BOXMAKER_LLAMA_SERVER": str(llama_home / "bin" / "llama-server"),
            "BOXMAKER_MODEL": str(model.resolve()),
            "BOXMAKER_TEMPLATE": str(REPO / "conf" / "templates" / "chatml-tools.jinja"),
            "BOXMAKER_LLAMA_PORT": str(port),
        }

    def _rewrite(self, config: Config) -> dict[str, Any]:
        """The source config with the paths moved into the run folder (through the tee)."""
        table = tomllib.loads(self.source.read_text())
        table.setdefault("inference", {})["socket"] = str(self.tee.listen)
        table.setdefault("channel", {})["socket"] = str(self.loop_sock)
        table.setdefault("paths", {})["home"] = str(self.home)
        table.setdefault("baseline", {})["system"] = str(config.baseline.system)
        return table

    def write_config(self, name: str, **inference: Any) -> Path:
        """The stack's config with `[inference]` overrides, for a `loopd complete` check."""
        table = {k: dict(v) for k, v in self.table.items()}
        table["inference"] |= inference
        path = self.run / name
        path.write_text(toml_dumps(table))
        return path

    def see(self, program: str) -> str:
        return f"; see {self.run / program}.log (and .err.log)"

    # --- driving ---------------------------------------------------------------------------------

    def wait_loopd(self) -> None:
        """Until loopd listens: it binds its socket once its self-test has passed."""

        wait_for(
            self.watched(self.loop_sock.exists), "loopd socket", START_BOUND, self.see("loopd")
        )

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(CONF), *args],
            env=self.env, capture_output=True, text=True, timeout=START_BOUND, check=False,
        )  # fmt: skip

    def loopd(self, *args: str, timeout: float = START_BOUND) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "boxmaker.loopd", *args], env=self.env,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def loopd_popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "boxmaker.loopd", *args], env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip

    def bxctl(self, *args: str, timeout: float = START_BOUND) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "boxmaker.bxctl", "chat", "--socket", str(self.loop_sock),
             *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def stop(self, keep: bool = False) -> None:
        """Shuts supervisord down; removes the run folder unless `keep` (its logs are there)."""
        if self.daemon is not None:
            self.ctl("shutdown")
            try:
                self.daemon.wait(START_BOUND)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.tee.stop()
        if not keep:
            shutil.rmtree(self.run, ignore_errors=True)
