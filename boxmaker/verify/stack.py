"""The stack `make verify-device` checks: supervisord with brokerd, inferproxy and `loopd serve`
(and, with no upstream given, the local llama-server of a model profile, as `make run` starts
it), in a temporary run folder.

Nothing of a running `make run` is touched: the run folder is new (under /tmp: socket paths stay
short), the local llama-server gets a free port, and the sessions live in the run folder's home.
loopd's config is the owner's (or the profile's) with its sockets, home, system prompt and
[tools] broker_socket rewritten: loopd reaches inferproxy through a Tee (tee.py) that keeps every
request. brokerd runs the profile's brokerd config with every path in the run folder: its own
workspace (where the tool checks plant their files), a copy of the profile's starter grants, its
decision log, and owner.sock, on which the checks give their approvals.
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
from boxmaker.verify.profile import DEFAULT, Profile, load_profile
from boxmaker.verify.programs import gave_up
from boxmaker.verify.tee import Tee

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf" / "supervisord.conf"
BIN = Path(sys.executable).parent
BUILD_SCRIPT = REPO / "scripts" / "build_llama_server.sh"
START_BOUND = 600.0  # seconds: llama-server loads its model, loopd passes its self-test (the
# tool model on 2 cores beside other work took over 180 s); a program that gives up ends it at once
FETCH_BOUND = 3600.0  # seconds: a first fetch of a profile's model (1.1 GB from PyPI)
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


def _script(path: Path, what: str) -> str:
    """Runs a build or fetch script; its last line of output (the path it made)."""
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, check=False,
                          timeout=FETCH_BOUND)  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip():
        tail = " ".join(done.stderr.strip().splitlines()[-1:])
        raise StackError(f"{what}: {tail}")
    return done.stdout.strip().splitlines()[-1]


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

    def __init__(
        self, config: Path | None, upstream: str | None, model: Path | None,
        profile: Profile | None = None,
    ) -> None:  # fmt: skip
        self.profile = profile or load_profile(DEFAULT)
        self.source = config or self.profile.loopd_config
        self.upstream = upstream
        self.model = model
        self.run = Path(tempfile.mkdtemp(prefix="bx-vd-", dir="/tmp"))
        self.home = self.run / "home"
        self.workspace = self.run / "workspace"
        self.loop_sock = self.run / "loop.sock"
        self.infer_sock = self.run / "infer.sock"
        self.broker_sock = self.run / "broker.sock"
        self.owner_sock = self.run / "owner.sock"
        self.decisions = self.run / "broker" / "decisions.jsonl"
        self.extra_grants = ""
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
        env["BOXMAKER_BROKERD_CONFIG"] = str(self._brokerd())
        self.env = env
        self.daemon = subprocess.Popen(
            [str(BIN / "supervisord"), "-n", "-c", str(CONF)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # Each wait also ends, at once, when supervisord has given up on a program.
        wait_for(self.watched(self.infer_sock.exists), "inferproxy socket", START_BOUND,
                 self.see("inferproxy"))  # fmt: skip
        wait_for(self.watched(self.owner_sock.exists), "brokerd sockets", START_BOUND,
                 self.see("brokerd"))  # fmt: skip
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
        """The local llama-server's program and environment (as scripts/run.sh sets them): the
        profile's model, fetched once per machine by the profile's script."""
        llama_home = Path(_script(BUILD_SCRIPT, "no llama-server that can serve on this machine"))
        if self.model is None and self.profile.fetch != BUILD_SCRIPT:
            _script(self.profile.fetch, f"the {self.profile.name} profile's model was not fetched")
        model = self.model or self.profile.model
        if not model.is_file():
            raise StackError(f"MODEL={model}: no such file")
        shutil.copy(REPO / "conf" / "programs" / "llama-server.conf", self.run / "supervisord.d")
        return {
            "BOXMAKER_LLAMA_SERVER": str(llama_home / "bin" / "llama-server"),
            "BOXMAKER_MODEL": str(model.resolve()),
            "BOXMAKER_LLAMA_PORT": str(port),
            **self.profile.llama_env(),
        }

    def _brokerd(self) -> Path:
        """brokerd's config (the profile's) with every path in the run folder, its program in
        supervisord.d/, its workspace made and the profile's starter grants copied in."""
        table = tomllib.loads(self.profile.brokerd_config.read_text())
        self.workspace.mkdir(mode=0o700, exist_ok=True)  # a caller may have made it (for shell)
        grants = self.run / "grants.toml"
        shutil.copy(self.profile.grants, grants)
        if self.extra_grants:  # the tests' own rules (a fetch of 127.0.0.1), after the profile's
            grants.write_text(grants.read_text() + "\n" + self.extra_grants)
        grants.chmod(0o600)
        table.setdefault("broker", {}).update(
            socket=str(self.broker_sock), owner_socket=str(self.owner_sock),
            workspace=str(self.workspace), grants=str(grants), home=str(self.home),
            log=str(self.decisions),
        )  # fmt: skip
        path = self.run / "brokerd.toml"
        path.write_text(toml_dumps(table))
        shutil.copy(REPO / "conf" / "programs" / "brokerd.conf", self.run / "supervisord.d")
        return path

    def _rewrite(self, config: Config) -> dict[str, Any]:
        """The source config with the paths moved into the run folder (through the tee)."""
        table = tomllib.loads(self.source.read_text())
        table.setdefault("inference", {})["socket"] = str(self.tee.listen)
        table.setdefault("channel", {})["socket"] = str(self.loop_sock)
        table.setdefault("paths", {})["home"] = str(self.home)
        table.setdefault("baseline", {})["system"] = str(config.baseline.system)
        table.setdefault("tools", {})["broker_socket"] = str(self.broker_sock)
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

    def bxctl(
        self, *args: str, timeout: float = START_BOUND, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """`bxctl chat` on the stack's loopd, answering approvals on owner.sock with the lines of
        `stdin` (none: every approval is left unanswered, which brokerd takes as a denial)."""
        return subprocess.run(
            [sys.executable, "-m", "boxmaker.bxctl", "chat", "--socket", str(self.loop_sock),
             "--owner-socket", str(self.owner_sock), *args], env=self.env, input=stdin,
            capture_output=True, text=True, timeout=timeout, check=False,
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
