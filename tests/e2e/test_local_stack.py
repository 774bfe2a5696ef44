"""What `make run` runs, end to end: the repository's supervisord config with the local
llama-server program (conf/programs/llama-server.conf), inferproxy and loopd (`loopd serve`, which
self-tests before it listens); three `bxctl chat --say` turns on one session; `supervisorctl
restart loopd`; a fourth turn that resumes the session from its log and hits llama-server's prompt
cache; then `supervisorctl shutdown` leaves no process behind.

Everything runs in a temporary run folder and on a free port, so it does not touch a `make run`
the developer may have going in the checkout's run/ folder.
"""

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.loopd.llama.info import CACHE_LOSS_SLACK_TOKENS
from boxmaker.loopd.session.check import check_session
from boxmaker.proto import CacheLoss, Usage, User
from boxmaker.proto.log import LogRecord
from tests.support.llama import ensure_built
from tests.support.procs import Daemon, wait_for, wait_for_socket

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf" / "supervisord.conf"
LOCAL_PROFILE = REPO / "conf" / "loopd.local.toml"
BIN = Path(sys.executable).parent
PROGRAMS = ("inferproxy", "llama-server", "loopd")
BOUND = 60.0  # seconds for llama-server to load the model on a loaded 2-core machine
# loopd retries its self-test while llama-server loads (startretries), then passes it.
LOOPD_BOUND = 3 * BOUND


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "supervisorctl"), "-c", str(CONF), *args],
        env=env, capture_output=True, text=True, timeout=BOUND, check=False,
    )  # fmt: skip


def write_config(run: Path) -> Path:
    """The local profile, with its sockets and home in this run folder."""
    text = LOCAL_PROFILE.read_text()
    for name in ("infer.sock", "loop.sock", "home"):
        old = f'"../run/{name}"'
        assert old in text, f"conf/loopd.local.toml no longer names {old}"
        text = text.replace(old, f'"{run / name}"')
    path = run / "loopd.toml"
    path.write_text(f'{text}\n[baseline]\nsystem = "{REPO / "conf" / "system.md"}"\n')
    return path


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class Stack:
    def __init__(self, run: Path, env: dict[str, str], port: int) -> None:
        self.run, self.env, self.port = run, env, port

    @property
    def sock(self) -> Path:
        return self.run / "loop.sock"

    def pids(self) -> dict[str, int]:
        out = ctl(self.env, "pid", "all").stdout.split()
        return dict(zip(PROGRAMS, map(int, out), strict=True))


@pytest.fixture
def stack() -> Iterator[Stack]:
    built = ensure_built()
    run = Path(tempfile.mkdtemp(prefix="bx-e2e-", dir="/tmp"))  # short: socket paths
    (run / "supervisord.d").mkdir()
    (run / "home").mkdir(mode=0o700)
    (run / "slots").mkdir()  # llama-server's --slot-save-path (issue 14)
    shutil.copy(REPO / "conf" / "programs" / "llama-server.conf", run / "supervisord.d")
    port = free_port()
    env = dict(os.environ)
    env.update(
        BOXMAKER_RUN=str(run),
        BOXMAKER_PYTHON=sys.executable,
        BOXMAKER_LLAMA_PORT=str(port),
        BOXMAKER_UPSTREAM=f"127.0.0.1:{port}",
        BOXMAKER_LLAMA_SERVER=str(built.binary),
        BOXMAKER_MODEL=str(built.model),
        BOXMAKER_TEMPLATE=str(REPO / "conf" / "templates" / "chatml-tools.jinja"),
        BOXMAKER_LOOPD_CONFIG=str(write_config(run)),
    )
    env.pop("BOXMAKER_SOCKET", None)
    daemon = Daemon([str(BIN / "supervisord"), "-n", "-c", str(CONF)], env=env)
    try:
        wait_for_socket(str(run / "supervisor.sock"), timeout=BOUND)
        wait_for(lambda: healthy(port), f"llama-server /health on port {port}", timeout=BOUND)
        wait_for_socket(str(run / "infer.sock"), timeout=BOUND)
        wait_for_socket(str(run / "loop.sock"), timeout=LOOPD_BOUND)
        yield Stack(run, env, port)
    except BaseException:
        for name in ("llama-server.log", "loopd.log", "loopd.err.log"):
            if (run / name).exists():
                print(f"--- {name}\n" + (run / name).read_text()[-3000:])
        raise
    finally:
        ctl(env, "shutdown")
        try:
            daemon.wait(BOUND)
        finally:
            daemon.kill()
            shutil.rmtree(run, ignore_errors=True)


def say(stack: Stack, *args: str) -> str:
    """One `bxctl chat --say` turn on session `e2e`; its answer."""
    argv = [str(BIN / "bxctl"), "chat", "--socket", str(stack.sock), "--session", "e2e"]
    p = subprocess.run(
        [*argv, "--say", *args],
        env=stack.env, capture_output=True, text=True, timeout=BOUND * 2, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr.splitlines()[0] == "session e2e", p.stderr
    return p.stdout


def records(stack: Stack) -> list[LogRecord]:
    """The session's records, read and checked from disk without its lock (its worker holds it)."""
    folder = stack.run / "home" / "sessions" / "e2e"
    log, baseline = folder / "0.jsonl", folder / "0.baseline.json"
    checked = check_session("e2e", str(log), log.read_bytes(), str(baseline), baseline.read_bytes())
    return list(checked.records)


def test_make_runs_stack_chats_restarts_loopd_and_hits_the_cache(stack: Stack) -> None:
    def all_running() -> bool:
        status = ctl(stack.env, "status").stdout
        return all(re.search(rf"^{name}\s+RUNNING", status, re.M) for name in PROGRAMS)

    wait_for(all_running, f"{', '.join(PROGRAMS)} to be RUNNING", timeout=LOOPD_BOUND)
    assert stat.S_IMODE(stack.sock.stat().st_mode) == 0o600

    # The same texts every run: temperature 0 and a fixed seed (the local profile) make the tiny
    # model's first answer a known one.
    assert "Paris" in say(stack, "What is the capital of France?", "--no-thinking")
    assert say(stack, "And of Italy?", "--no-thinking").strip()
    assert say(stack, "Thanks.", "--no-thinking").strip()
    before = records(stack)
    previous = before[-1]
    assert isinstance(previous, Usage), before

    old = stack.pids()["loopd"]
    restart = ctl(stack.env, "restart", "loopd")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert stack.pids()["loopd"] != old
    wait_for_socket(str(stack.sock), timeout=LOOPD_BOUND)

    assert say(stack, "Say goodbye.", "--no-thinking").strip()
    after = records(stack)
    assert after[: len(before)] == before  # nothing lost or rewritten
    assert isinstance(after[len(before)], User)
    first = next(r for r in after[len(before) :] if isinstance(r, Usage))
    total = previous.cache_n + previous.prompt_n + previous.predicted_n
    assert total > CACHE_LOSS_SLACK_TOKENS  # enough for the rule to be able to show a loss
    assert first.cache_n >= total - CACHE_LOSS_SLACK_TOKENS, (first, total)
    assert not [r for r in after if isinstance(r, CacheLoss)]

    pids = stack.pids()
    down = ctl(stack.env, "shutdown")
    assert down.returncode == 0, down.stdout + down.stderr

    def gone() -> bool:
        return not any(os.path.exists(f"/proc/{pid}") for pid in pids.values())

    wait_for(gone, f"the programs ({pids}) to exit", timeout=BOUND)
    assert not (stack.run / "infer.sock").exists()
    assert not stack.sock.exists()
