"""What `make run` runs, end to end, started by `make run`'s own script (scripts/run.sh, stdin not
a terminal): the build script's cached llama-server, the run folder's layout (supervisord.d/ with
conf/programs/llama-server.conf and brokerd.conf, home/, workspace/, run.env), the repository's
supervisord config with brokerd (conf/brokerd.local.toml and the starter grants), llama-server,
inferproxy and loopd (`loopd serve`, which waits for the model to load and
self-tests before it listens); three `bxctl chat --say` turns on one session; `supervisorctl
restart loopd`; a fourth turn that resumes the session from its log and hits llama-server's prompt
cache; `make status`'s script on that run folder; a second run.sh, which starts it all afresh in
seconds, and a turn after it; then `supervisorctl shutdown` leaves no process behind.

Everything runs in a temporary run folder (BOXMAKER_RUN) and on a free port, with a config whose
sockets are in that folder, so it does not touch a `make run` the developer may have going in the
checkout's run/ folder.
"""

import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.loopd.llama.info import CACHE_LOSS_SLACK_TOKENS
from boxmaker.proto import CacheLoss, SessionStart, Usage, User
from boxmaker.proto.broker import BROKER_KINDS
from boxmaker.proto.frame import NEED_DATA, Frame, FrameDecoder, encode_frame
from boxmaker.proto.log import LogRecord
from boxmaker.session.check import check_session
from boxmaker.verify.stack import healthy
from tests.support import rawhttp
from tests.support.procs import wait_for, wait_for_socket
from tests.support.run_stack import BIN, BOUND, LOOPD_BOUND, PROGRAMS, REPO, ctl, run_sh, run_stack


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
    logs = ("llama-server.log", "loopd.log", "loopd.err.log", "supervisord.log")
    with run_stack(logs) as rs:
        run, env, port, started = rs.run, rs.env, rs.port, rs.started
        assert started.returncode == 0, started.stdout + started.stderr
        assert "standard input is not a terminal, so no chat" in started.stdout
        conf_d = sorted(p.name for p in (run / "supervisord.d").iterdir())
        assert conf_d == ["brokerd.conf", "llama-server.conf"]
        assert (run / "grants.toml").read_bytes() == (REPO / "conf/grants.local.toml").read_bytes()
        assert (run / "workspace").is_dir()
        assert f"BOXMAKER_OWNER_SOCKET={run / 'owner.sock'}" in (run / "run.env").read_text()
        assert stat.S_IMODE((run / "home").stat().st_mode) == 0o700
        assert f"BOXMAKER_SOCKET={run / 'loop.sock'}" in (run / "run.env").read_text()
        assert healthy("127.0.0.1", port)
        wait_for_socket(str(run / "loop.sock"), timeout=LOOPD_BOUND)
        yield Stack(run, env, port)


def say(stack: Stack, *args: str, session: str = "e2e") -> str:
    """One `bxctl chat --say` turn on `session`; its answer."""
    argv = [str(BIN / "bxctl"), "chat", "--socket", str(stack.sock), "--session", session]
    p = subprocess.run(
        [*argv, "--say", *args],
        env=stack.env, capture_output=True, text=True, timeout=BOUND * 2, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr.splitlines()[0] == f"session {session}", p.stderr
    return p.stdout


def records(stack: Stack, session: str = "e2e") -> list[LogRecord]:
    """The session's records, read and checked from disk without its lock (its worker holds it)."""
    folder = stack.run / "home" / "sessions" / session
    log, baseline = folder / "0.jsonl", folder / "0.baseline.json"
    checked = check_session(session, str(log), log.read_bytes(), str(baseline),
                            baseline.read_bytes())  # fmt: skip
    return list(checked.records)


def own_tokens(stack: Stack, text: str) -> int:
    resp = rawhttp.call("127.0.0.1", stack.port, "POST", "/tokenize", {"content": text}, BOUND)
    return len(orjson.loads(resp.body)["tokens"])


def first_read(stack: Stack, session: str) -> int:
    """The prompt tokens the server read (not from its cache) for the session's first request."""
    first = next(r for r in records(stack, session) if isinstance(r, Usage))
    return first.prompt_n


def tools_offered(path: Path) -> list[str]:
    """The tools brokerd lists on broker.sock, as loopd asks for them."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(BOUND)
        sock.connect(str(path))
        sock.sendall(encode_frame("list", {}, True, BROKER_KINDS))
        decoder = FrameDecoder(BROKER_KINDS)
        while (got := decoder.next_frame()) is NEED_DATA:
            decoder.receive_data(sock.recv(65536))
    assert isinstance(got, Frame), got
    return [t["name"] for t in got.body["tools"]]


def test_make_runs_stack_chats_restarts_loopd_and_hits_the_cache(stack: Stack) -> None:
    def all_running() -> bool:
        status = ctl(stack.env, "status").stdout
        return all(re.search(rf"^{name}\s+RUNNING", status, re.M) for name in PROGRAMS)

    wait_for(all_running, f"{', '.join(PROGRAMS)} to be RUNNING", timeout=LOOPD_BOUND)
    assert stat.S_IMODE(stack.sock.stat().st_mode) == 0o600
    # brokerd serves loopd's tool calls with the starter grants: what find_tool would offer
    assert tools_offered(stack.run / "broker.sock") == [
        "clock", "read_file", "list_dir", "write_file", "edit_file", "note", "shell", "fetch",
    ]  # fmt: skip
    assert stat.S_IMODE((stack.run / "owner.sock").stat().st_mode) == 0o600

    # The same texts every run: temperature 0 and a fixed seed (the local profile) make the tiny
    # model's first answer a known one.
    # No --no-thinking: the local profile's [loop] thinking is false, so the answers are content.
    assert "Paris" in say(stack, "What is the capital of France?")
    # Issue 40.3: every slot held the baseline before loopd listened (one read it, the other
    # got a copy), so each new session's first request reads its own tokens only, whichever
    # slot it takes; the second session takes the other slot (slot_choice spread).
    assert "loopd: prewarm: the baseline (" in (stack.run / "loopd.log").read_text()
    asked = own_tokens(stack, "What is the capital of France?")
    assert first_read(stack, "e2e") <= asked + 64, (first_read(stack, "e2e"), asked)
    assert say(stack, "Hello there.", session="e2e-2").strip()
    asked = own_tokens(stack, "Hello there.")
    assert first_read(stack, "e2e-2") <= asked + 64, (first_read(stack, "e2e-2"), asked)
    slots = {r.slot for name in ("e2e", "e2e-2") for r in records(stack, name)[:1]
             if isinstance(r, SessionStart)}  # fmt: skip
    assert slots == {0, 1}, slots  # the read slot and the copied one
    assert say(stack, "And of Italy?").strip()
    assert say(stack, "Thanks.").strip()
    before = records(stack)
    previous = before[-1]
    assert isinstance(previous, Usage), before

    old = stack.pids()["loopd"]
    restart = ctl(stack.env, "restart", "loopd")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert stack.pids()["loopd"] != old
    wait_for_socket(str(stack.sock), timeout=LOOPD_BOUND)

    assert say(stack, "Say goodbye.").strip()
    after = records(stack)
    assert after[: len(before)] == before  # nothing lost or rewritten
    assert isinstance(after[len(before)], User)
    first = next(r for r in after[len(before) :] if isinstance(r, Usage))
    total = previous.cache_n + previous.prompt_n + previous.predicted_n
    assert total > CACHE_LOSS_SLACK_TOKENS  # enough for the rule to be able to show a loss
    assert first.cache_n >= total - CACHE_LOSS_SLACK_TOKENS, (first, total)
    assert not [r for r in after if isinstance(r, CacheLoss)]

    status = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "status.py")],
        env=stack.env, capture_output=True, text=True, timeout=BOUND, check=False,
    )  # fmt: skip
    assert status.returncode == 0, status.stdout + status.stderr
    for name in PROGRAMS:
        assert re.search(rf"^  {name}\s+RUNNING", status.stdout, re.M), status.stdout
    assert f"{stack.run / 'infer.sock'} (listening), {stack.sock} (listening)" in status.stdout
    assert "model: SmolLM2-135M-Instruct.Q4_1.gguf (2 slots of 2048 tokens)" in status.stdout
    assert f"sessions: 2 in {stack.run / 'home'} (newest: e2e)" in status.stdout

    # A second `make run` starts it all afresh, in seconds, and the session goes on.
    began = time.monotonic()
    again = run_sh(stack.env)
    took = time.monotonic() - began
    assert again.returncode == 0, again.stdout + again.stderr
    assert "starting it afresh" in again.stdout
    assert took < BOUND, f"a second run took {took:.1f} s"
    assert say(stack, "Hello again.").strip()

    pids = stack.pids()
    down = ctl(stack.env, "shutdown")
    assert down.returncode == 0, down.stdout + down.stderr

    def gone() -> bool:
        return not any(os.path.exists(f"/proc/{pid}") for pid in pids.values())

    wait_for(gone, f"the programs ({pids}) to exit", timeout=BOUND)
    assert not (stack.run / "infer.sock").exists()
    assert not stack.sock.exists()
