"""`loopd serve` as a real subprocess against the scripted fake llama-server, and a channel client.

`ServeEnv` makes a short folder with the fake server (tests/support/fakeserver.py) on infer.sock,
a system prompt, a home and a config, and starts `python -m boxmaker.loopd serve` on loop.sock.
The fake answers everything the daemon asks:

- /props: a fixed template, 2 slots of 2,048 tokens (the config's [expect] matches it);
- /tokenize: a token per 4 bytes (the budget check of a new session);
- the self-test's tool-call request (the `get_time` tool, tool_choice auto): a call of get_time;
- every other chat request: the next `Said` loaded with `model.load`, else "ok", with the prompt
  cache played as tests/support/turn.py's ScriptedModel plays it (so the self-test's cache
  check passes: turn 2 extends turn 1). `model.hold()` makes the next chat requests wait until
  `model.release()`, so a test can act while a turn is in flight, without sleeping.

`turn()` is a channel client: one connection, one `turn` frame, every frame until the final one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.proto import ChannelBody, Turn, channel_frame, decode_body
from boxmaker.proto.frame import CLOSED, NEED_DATA, FrameDecoder
from tests.support.config import fake_expect, fake_inference, loopd_toml
from tests.support.fakeserver import FakeServer
from tests.support.procs import DEFAULT_BOUND, Daemon, python_module, short_tmpdir
from tests.support.recorded import Recorded
from tests.support.replies import Reply, json_reply, sse_reply
from tests.support.turn import (
    CONTEXT_FULL,
    ScriptedModel,
    calls,
    common_prefix,
    completion_events,
    prompt_bytes,
    say,
)

TEMPLATE = "{{ serve test template }}"
START_LINE = "loopd: listening on"
BOUND_S = DEFAULT_BOUND  # a loaded 2-core machine starting Python processes (procs.py)
# The product's own waits that config_text writes (issue 29.9): a client's bound is derived from
# them (`reply_bound_s`), never shorter, so a turn that waits as loopd is told to is not cut.
FAKE_INFERENCE_WAITS = {"liveness_ms": 5000, "control_timeout_ms": 5000, "busy_wait_ms": 60_000}
CHANNEL_WAITS = {"worker_wait_ms": 30_000}  # [channel]'s default, written out
LOOP_WAITS = {"tool_timeout_ms": 30_000}  # [loop]'s default, written out


def reply_bound_s(
    channel: dict[str, Any] | None = None,
    inference: dict[str, Any] | None = None,
    loop: dict[str, Any] | None = None,
) -> float:
    """The longest a turn on config_text's config (with these overrides) may stay silent between
    two frames, plus BOUND_S for a busy machine: waiting for a worker, then the longest of a wait
    at the slot gate, a silent stream (liveness, then the connect) and a tool call."""
    ch = {**CHANNEL_WAITS, **(channel or {})}
    inf = {**FAKE_INFERENCE_WAITS, **(inference or {})}
    lp = {**LOOP_WAITS, **(loop or {})}
    stream = inf["liveness_ms"] + inf["control_timeout_ms"]
    ms: int = ch["worker_wait_ms"] + max(inf["busy_wait_ms"], stream, lp["tool_timeout_ms"])
    return ms / 1000 + BOUND_S


REPLY_BOUND_S = reply_bound_s()  # config_text's own limits
# [inference] poll_ms for a test that waits on a held request's first frame or its cancel: loopd
# tells a waiting turn's progress, and sees its cancel, once a poll (5 s by default)
QUICK_POLL = {"poll_ms": 500}


class ServeModel(ScriptedModel):
    """ScriptedModel that answers the self-test's tool call, defaults to "ok", and can hold."""

    def __init__(self) -> None:
        super().__init__()
        self._held = threading.Event()
        self._holding = False
        self._hold_all = False
        self._only: str | None = None
        self.waiting = 0  # chat requests waiting in hold()

    def hold(self, selftest: bool = False, only: str | None = None) -> None:
        """Holds the chat requests of sessions (those with a system message) from now on; with
        `selftest`, every chat request (the self-test's have none); with `only`, those whose last
        message says `only`."""
        with self._lock:
            self._holding = True
            self._hold_all = selftest
            self._only = only
            self._held.clear()

    def release(self) -> None:
        with self._lock:
            self._holding = False
            self._held.set()

    def _held_here(self, body: dict[str, Any]) -> bool:
        if not self._holding:
            return False
        if self._only is not None:
            return bool(body["messages"][-1].get("content") == self._only)
        return self._hold_all or body["messages"][0]["role"] == "system"

    def __call__(self, request: Recorded) -> Reply:
        body = request.json
        assert isinstance(body, dict)
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        selftest_call = body.get("tool_choice") == "auto" and "get_time" in tools
        with self._lock:
            holding = not selftest_call and self._held_here(body)
            self.waiting += holding
        if holding:
            self._held.wait(BOUND_S)
            with self._lock:
                self.waiting -= 1
        with self._lock:
            if selftest_call:
                said = calls(("get_time", {"timezone": "Europe/Paris"}))
            else:
                said = self._queue.popleft() if self._queue else say("ok")
            self.served += 1
            if said.status is not None:
                return json_reply(said.status, CONTEXT_FULL if said.status == 400 else {})
            prompt = prompt_bytes(body)
            cache_n = common_prefix(prompt, self._cache)
            generated = orjson.dumps(said.message().to_json()) + b"\n"
            self._cache = prompt + generated
            reported = cache_n if said.cache_n is None else said.cache_n
            events = completion_events(said, reported, len(prompt) - cache_n, len(generated))
        return sse_reply(events)


def props_reply(_request: Recorded) -> Reply:
    return json_reply(
        200,
        {
            "chat_template": TEMPLATE,
            "total_slots": 2,
            "default_generation_settings": {"n_ctx": 2048},
        },
    )


def slots_reply(_request: Recorded) -> Reply:
    """Both slots at work: a held request is one the server is still processing."""
    return json_reply(200, [{"id": i, "is_processing": True, "n_ctx": 2048} for i in (0, 1)])


def tokenize_reply(request: Recorded) -> Reply:
    body = request.json
    assert isinstance(body, dict)
    return json_reply(200, {"tokens": [1] * (len(body["content"]) // 4 + 1)})


def config_text(
    folder: Path,
    loop: dict[str, Any] | None = None,
    compact: dict[str, Any] | None = None,
    inference: dict[str, Any] | None = None,
    **channel: Any,
) -> str:
    """A loopd.toml for the fake server. [compact] is off unless `compact` is given: the fake
    counts a byte as a token, so n_ctx = 2048 would fold every session after a turn or two."""
    keys = {
        **FAKE_INFERENCE_WAITS,
        "retry_attempts": 1,
        "retry_delays_ms": [],
        "max_tokens": 4194304,  # the fake counts a byte as a token: big answers must pass
        **(inference or {}),
    }
    infer = fake_inference(folder / "infer.sock", **keys)
    return loopd_toml(
        {
            "inference": infer,
            "expect": fake_expect(hashlib.sha256(TEMPLATE.encode()).hexdigest()),
            "paths": {"home": str(folder / "home")},
            "baseline": {"system": str(folder / "system.md")},
            "channel": {"socket": str(folder / "run" / "loop.sock"), **CHANNEL_WAITS, **channel},
            "loop": {**LOOP_WAITS, **(loop or {})},
            "compact": compact or {"enabled": False},
        }
    )


class ServeEnv:
    def __init__(self, folder: Path, fake: FakeServer) -> None:
        self.folder = folder
        self.fake = fake
        self.model = ServeModel()
        fake.on("GET", "/props", props_reply)
        fake.on("POST", "/tokenize", tokenize_reply)
        fake.on("GET", "/slots", slots_reply)
        fake.on("POST", CHAT_PATH, self.model)
        (folder / "system.md").write_text("You are a test.\n")
        self.socket = folder / "run" / "loop.sock"
        self.home = folder / "home"
        self.daemons: list[Daemon] = []

    def answer_message(self, content: str, reply: Callable[[Recorded], Reply]) -> None:
        """Completions whose last message is `content` get `reply`; the rest the scripted
        model's answers, as before."""
        model = self.model

        def chat(request: Recorded) -> Reply:
            body = request.json
            assert isinstance(body, dict)
            if body["messages"][-1].get("content") == content:
                return reply(request)
            return model(request)

        self.fake.on("POST", CHAT_PATH, chat)

    def write_config(
        self,
        compact: dict[str, Any] | None = None,
        inference: dict[str, Any] | None = None,
        **channel: Any,
    ) -> Path:
        path = self.folder / "loopd.toml"
        path.write_text(config_text(self.folder, compact=compact, inference=inference, **channel))
        return path

    def start(
        self,
        wait: bool = True,
        compact: dict[str, Any] | None = None,
        inference: dict[str, Any] | None = None,
        **channel: Any,
    ) -> Daemon:
        """`loopd serve` with these [channel] keys (and [compact], off by default, and
        [inference] keys over config_text's); waits for its start line unless told not to."""
        config = self.write_config(compact, inference, **channel)
        daemon = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(config)))
        self.daemons.append(daemon)
        if wait:
            daemon.wait_for_line(START_LINE, BOUND_S)
        return daemon

    def log_lines(self, session: str) -> list[dict[str, Any]]:
        path = self.home / "sessions" / session / "0.jsonl"
        data = path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]  # a line the worker is still writing is not read
        return [orjson.loads(line) for line in whole.splitlines()]

    def record_types(self, session: str) -> list[str]:
        return [str(r["type"]) for r in self.log_lines(session)]


@contextmanager
def serve_env() -> Iterator[ServeEnv]:
    folder = short_tmpdir("bs-")
    env: ServeEnv | None = None
    try:
        with FakeServer(folder / "infer.sock") as fake:
            env = ServeEnv(folder, fake)
            try:
                yield env
            finally:
                env.model.release()
                for daemon in env.daemons:
                    daemon.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def children(pid: int) -> set[int]:
    """The live child processes of `pid`, by their parent in /proc/<p>/status. Not
    /proc/<pid>/task/*/children: a worker spawned by a thread that has since ended is moved to
    another thread's list, and a read during the move missed it (a two-worker run under load)."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        ppid = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")), "")
        if ppid == str(pid):
            found.add(int(entry))
    return {p for p in found if alive(p)}


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# ---- a channel client ---------------------------------------------------------------------------


def connect(path: Path, timeout: float = REPLY_BOUND_S) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(path))
    return sock


def read_frames(sock: socket.socket) -> list[ChannelBody]:
    """Every frame until the final one (or the end of the connection), decoded."""
    decoder = FrameDecoder()
    out: list[ChannelBody] = []
    while True:
        frame = decoder.next_frame()
        if frame is CLOSED:
            return out
        if frame is NEED_DATA:
            decoder.receive_data(sock.recv(65536))
            continue
        out.append(decode_body(frame))
        if frame.final:
            return out


def turn_bytes(session: str, content: str, resume: bool, compact: bool = False) -> bytes:
    return channel_frame(Turn(session, content, resume, None, compact or None))


class TurnClient:
    """A turn whose frames are read by a thread as they come, so a test can watch them."""

    def __init__(
        self,
        path: Path,
        session: str,
        content: str = "hi",
        resume: bool = True,
        bound_s: float = REPLY_BOUND_S,
    ) -> None:
        self.bound_s = bound_s
        self.sock = connect(path, bound_s)
        self.frames: list[ChannelBody] = []
        self.sock.sendall(turn_bytes(session, content, resume))
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        decoder = FrameDecoder()
        with self.sock:
            while True:
                frame = decoder.next_frame()
                if frame is CLOSED:
                    return
                if frame is NEED_DATA:
                    try:
                        decoder.receive_data(self.sock.recv(65536))
                    except OSError:
                        return
                    continue
                self.frames.append(decode_body(frame))
                if frame.final:
                    return

    def result(self) -> list[ChannelBody]:
        """Every frame, once the final one has come (bounded)."""
        self._thread.join(self.bound_s)
        assert not self._thread.is_alive(), f"no final frame within {self.bound_s} s: {self.frames}"
        return self.frames


def turn(
    path: Path,
    session: str,
    content: str = "hi",
    resume: bool = True,
    compact: bool = False,
    bound_s: float = REPLY_BOUND_S,
) -> list[ChannelBody]:
    """One turn on its own connection (with `compact`, a `/compact`): its frames, the final one
    last. `bound_s` is the longest silence between two frames (`reply_bound_s` of the config)."""
    with connect(path, bound_s) as sock:
        sock.sendall(turn_bytes(session, content, resume, compact))
        return read_frames(sock)


def session_worker(loopd_pid: int, session: str) -> int:
    """The worker that holds the session's log open (not the spare beside it)."""
    for pid in children(loopd_pid):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if f"/sessions/{session}/" in target:
                return pid
    raise AssertionError(f"no worker of loopd {loopd_pid} has {session}'s log open")
