"""What `make run` runs, end to end: the repository's supervisord config with the local
llama-server program (conf/programs/llama-server.conf) and inferproxy, `loopd selftest` against
them, and the chat preview answering two turns from a pipe; then `supervisorctl shutdown` leaves
no process behind.

Everything runs in a temporary run folder and on a free port, so it does not touch a `make run`
the developer may have going in the checkout's run/ folder.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.llama import ensure_built
from tests.support.procs import Daemon, wait_for, wait_for_socket

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf" / "supervisord.conf"
LOCAL_PROFILE = REPO / "conf" / "loopd.local.toml"
BIN = Path(sys.executable).parent
PROGRAMS = ("inferproxy", "llama-server")
BOUND = 60.0  # seconds for llama-server to load the model on a loaded 2-core machine


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


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class Stack:
    def __init__(self, run: Path, env: dict[str, str], port: int) -> None:
        self.run, self.env, self.port = run, env, port

    def config(self) -> Path:
        """The local profile, pointed at this run folder's infer.sock."""
        text = LOCAL_PROFILE.read_text()
        old = 'socket = "../run/infer.sock"'
        assert old in text, "conf/loopd.local.toml no longer names ../run/infer.sock"
        path = self.run / "loopd.toml"
        path.write_text(text.replace(old, f'socket = "{self.run / "infer.sock"}"'))
        return path

    def pids(self) -> dict[str, int]:
        out = ctl(self.env, "pid", "all").stdout.split()
        return dict(zip(PROGRAMS, map(int, out), strict=True))


@pytest.fixture
def stack() -> Iterator[Stack]:
    built = ensure_built()
    run = Path(tempfile.mkdtemp(prefix="bx-e2e-", dir="/tmp"))  # short: socket paths
    (run / "supervisord.d").mkdir()
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
    )
    daemon = Daemon([str(BIN / "supervisord"), "-n", "-c", str(CONF)], env=env)
    try:
        wait_for_socket(str(run / "supervisor.sock"), timeout=BOUND)
        wait_for(lambda: healthy(port), f"llama-server /health on port {port}", timeout=BOUND)
        wait_for_socket(str(run / "infer.sock"), timeout=BOUND)
        yield Stack(run, env, port)
    except BaseException:
        log = run / "llama-server.log"
        if log.exists():
            print(log.read_text()[-3000:])
        raise
    finally:
        ctl(env, "shutdown")
        try:
            daemon.wait(BOUND)
        finally:
            daemon.kill()
            shutil.rmtree(run, ignore_errors=True)


def test_make_runs_stack_self_tests_chats_and_shuts_down(stack: Stack) -> None:
    def both_running() -> bool:
        status = ctl(stack.env, "status").stdout
        return all(re.search(rf"^{name}\s+RUNNING", status, re.M) for name in PROGRAMS)

    wait_for(both_running, "inferproxy and llama-server to be RUNNING", timeout=BOUND)
    pids = stack.pids()
    config = stack.config()

    selftest = subprocess.run(
        [sys.executable, "-m", "boxmaker.loopd", "selftest", "--config", str(config)],
        capture_output=True, text=True, timeout=BOUND * 2, check=False,
    )  # fmt: skip
    assert selftest.returncode == 0, selftest.stdout + selftest.stderr
    assert [line.split()[:2] for line in selftest.stdout.splitlines()] == [
        ["ok", "props:"], ["ok", "tool_call:"], ["ok", "cache:"],
    ]  # fmt: skip

    chat = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "chat_preview.py"), "--config", str(config),
         "--no-thinking"],
        input="What is the capital of France?\nAnd of Italy?\n/quit\n",
        capture_output=True, text=True, timeout=BOUND * 2, check=False,
    )  # fmt: skip
    assert chat.returncode == 0, chat.stdout + chat.stderr
    answers = [a.strip() for a in chat.stdout.split("> ")[1:]]
    # Two answers and the prompt after them; temperature 0 and a fixed seed (the local profile)
    # make the tiny model's first answer a known one.
    assert len(answers) == 3, chat.stdout
    assert answers[2] == "", chat.stdout
    assert "Paris" in answers[0], chat.stdout
    assert answers[1], chat.stdout
    assert "[error" not in chat.stdout, chat.stdout

    down = ctl(stack.env, "shutdown")
    assert down.returncode == 0, down.stdout + down.stderr

    def gone() -> bool:
        return not any(os.path.exists(f"/proc/{pid}") for pid in pids.values())

    wait_for(gone, f"the programs ({pids}) to exit", timeout=BOUND)
    assert not (stack.run / "infer.sock").exists()
