"""What the turn-loop tests share: a scripted model on the fake server, configs, sessions on disk,
a clock that ticks, and tool ports that misbehave on purpose.

`ScriptedModel` answers POST /v1/chat/completions on tests/support/fakeserver.py from a queue of
`Said` completions (or an HTTP error), streamed the way llama-server streams them. It also plays
the server's prompt cache, so a turn loop that breaks the prefix property shows up in the timings
as it would on the real server:

- the prompt is the request's tools, then each message, each as compact JSON on its own line;
- `cache_n` is the bytes the prompt shares with what the slot held (the previous prompt plus the
  completion it generated, the latter as the assistant message the client should send back);
- `prompt_n` is the rest of the prompt, `predicted_n` the bytes of that assistant message.

A loop that sends every request as an extension of the one before therefore gets `cache_n` equal
to the previous total (no CacheLoss), and one that rewrites an earlier message does not.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from boxmaker.loopd.config import Config, parse_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.tools.registry import CALL_TOOL, CORE_SCHEMAS
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import (
    AssistantMessage,
    ToolCall,
    ToolRequest,
    ToolResponse,
    TurnDone,
    TurnEvent,
    WireError,
    format_time,
)
from boxmaker.session.baseline import Baseline
from boxmaker.session.store import SessionLog, SessionStore
from tests.support.config import MODEL, fake_expect, fake_inference, loopd_toml
from tests.support.fake_tools import FakeTools, fake_registry
from tests.support.fakeserver import FakeServer
from tests.support.recorded import Recorded
from tests.support.replies import Reply, json_reply, sse_reply

SYSTEM = "You are a test."
START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


# ---- what the model says ------------------------------------------------------------------------


@dataclass(frozen=True)
class Said:
    """One scripted completion; `status` instead makes the server answer that HTTP error."""

    content: str | None = None
    reasoning: str | None = None
    calls: tuple[ToolCall, ...] = ()
    status: int | None = None
    cache_n: int | None = None  # forces the reported cache_n (a CacheLoss on purpose)

    def message(self) -> AssistantMessage:
        return AssistantMessage(self.content, self.reasoning, self.calls)


def say(text: str) -> Said:
    return Said(content=text)


def calls(*pairs: tuple[str, object], prefix: str = "call") -> Said:
    """A completion that calls tools: (name, arguments as an object or as raw text)."""
    out = []
    for i, (name, args) in enumerate(pairs):
        text = args if isinstance(args, str) else orjson.dumps(args).decode()
        out.append(ToolCall(f"{prefix}_{i}", name, text))
    return Said(calls=tuple(out))


def call_tool(name: str, arguments: dict[str, Any], prefix: str) -> Said:
    """A completion that runs one brokerd tool through loopd's call_tool."""
    return calls(("call_tool", {"name": name, "arguments": arguments}), prefix=prefix)


CONTEXT_FULL = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
    }
}


def prompt_bytes(body: dict[str, Any]) -> bytes:
    lines = [orjson.dumps(body.get("tools", []))]
    lines += [orjson.dumps(m) for m in body["messages"]]
    return b"".join(line + b"\n" for line in lines)


def common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def stream_chunk(
    delta: dict[str, Any],
    finish: str | None = None,
    chunk_id: str = "chatcmpl-scripted",
    **extra: Any,
) -> dict[str, Any]:
    """One chunk of a streamed completion, as llama-server sends it."""
    return {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 1796011468,
        "id": chunk_id,
        "model": MODEL,
        "object": "chat.completion.chunk",
        **extra,
    }


def completion_events(said: Said, cache_n: int, prompt_n: int, predicted_n: int) -> list[Any]:
    """The stream's chunks for one completion, as llama-server sends them."""
    chunk = stream_chunk
    events: list[Any] = [chunk({"role": "assistant", "content": None})]
    if said.reasoning is not None:
        events.append(chunk({"reasoning_content": said.reasoning}))
    if said.content is not None:
        events.append(chunk({"content": said.content}))
    for i, c in enumerate(said.calls):
        fn = {"name": c.name, "arguments": c.arguments}
        events.append(
            chunk({"tool_calls": [{"index": i, "id": c.id, "type": "function", "function": fn}]})
        )
    timings = {"cache_n": cache_n, "prompt_n": prompt_n, "predicted_n": predicted_n}
    finish = "tool_calls" if said.calls else "stop"
    events.append(chunk({}, finish, timings=timings))
    return events


def slow_stream(
    words: Sequence[str], delay_s: float, chunk_id: str, timings: dict[str, int] | None = None
) -> Reply:
    """A completion that streams one word a chunk, `delay_s` apart. With `timings` it ends (a stop
    chunk that carries them, then [DONE]); without, only the client's stop ends it."""
    events = [stream_chunk({"role": "assistant", "content": None}, chunk_id=chunk_id)]
    events += [stream_chunk({"content": word}, chunk_id=chunk_id) for word in words]
    if timings is None:
        return sse_reply(events, delay_s=delay_s, done=False)
    events.append(stream_chunk({}, "stop", chunk_id=chunk_id, timings=timings))
    return sse_reply(events, delay_s=delay_s)


class ScriptedModel:
    """The chat endpoint's handler: answers from the queue, plays the prompt cache."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Said] = deque()
        self._cache = b""
        self.served = 0

    def load(self, completions: Iterable[Said]) -> None:
        """Replaces what is left of the queue (a turn that ended early leaves some behind)."""
        with self._lock:
            self._queue = deque(completions)

    def left(self) -> int:
        with self._lock:
            return len(self._queue)

    def __call__(self, request: Recorded) -> Reply:
        with self._lock:
            if not self._queue:
                raise AssertionError("the loop asked for a completion the script does not have")
            said = self._queue.popleft()
            self.served += 1
            if said.status is not None:
                return json_reply(said.status, CONTEXT_FULL if said.status == 400 else {})
            prompt = prompt_bytes(request.json)
            cache_n = common_prefix(prompt, self._cache)
            generated = orjson.dumps(said.message().to_json()) + b"\n"
            self._cache = prompt + generated
            reported = cache_n if said.cache_n is None else said.cache_n
            events = completion_events(said, reported, len(prompt) - cache_n, len(generated))
        return sse_reply(events)


def serve_model(fake: FakeServer) -> ScriptedModel:
    model = ScriptedModel()
    fake.on("POST", CHAT_PATH, model)
    return model


def chat_bodies(fake: FakeServer) -> list[dict[str, Any]]:
    bodies = []
    for r in fake.requests(CHAT_PATH):
        assert isinstance(r.json, dict)
        bodies.append(r.json)
    return bodies


# ---- config, sessions, time ---------------------------------------------------------------------


def config_text(socket: Path, home: Path, system: Path | None = None, **loop: Any) -> str:
    """A whole loopd.toml: the fake server's socket, short waits, the home, the system prompt
    file (when given) and [loop] overrides."""
    sections: dict[str, dict[str, Any]] = {
        "inference": fake_inference(
            socket,
            liveness_ms=2000,
            control_timeout_ms=2000,
            retry_attempts=1,
            retry_delays_ms=[],
        ),
        "expect": fake_expect(),
        "paths": {"home": str(home)},
        "loop": loop,
    }
    if system is not None:
        sections["baseline"] = {"system": str(system)}
    return loopd_toml(sections)


def config_for(socket: Path, home: Path, **loop: Any) -> Config:
    return parse_config(config_text(socket, home, **loop), "test.toml", home)


class Ticker:
    """A clock for records: a new millisecond on every call, from START. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.n = 0

    def __call__(self) -> str:
        with self._lock:
            self.n += 1
            return format_time(START + timedelta(milliseconds=self.n))


def baseline() -> Baseline:
    return Baseline(SYSTEM, CORE_SCHEMAS)


def new_session(home: Path, session_id: str = "s1", slot: int = 0) -> SessionLog:
    return SessionStore(home).create(session_id, baseline(), slot=slot, time=format_time(START))


def client(config: Config) -> Client:
    return Client(config.inference)


# ---- ports that misbehave -----------------------------------------------------------------------


@dataclass
class RecordingPort:
    """Wraps a port and keeps every request it was given, in arrival order."""

    inner: Any
    seen: list[ToolRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, request: ToolRequest) -> ToolResponse:
        with self._lock:
            self.seen.append(request)
        response: ToolResponse = self.inner.call(request)
        return response


class StaggeredPort:
    """Answers `echo` after a delay that shrinks with the call number, so a parallel batch tends
    to finish out of call order. `finished` keeps the order they finished in."""

    def __init__(self, inner: Any, step_s: float = 0.03, span: int = 8) -> None:
        self.inner = inner
        self.step_s = step_s
        self.span = span
        self.finished: list[int] = []
        self._lock = threading.Lock()

    def call(self, request: ToolRequest) -> ToolResponse:
        time.sleep(self.step_s * (self.span - request.call % self.span))
        response: ToolResponse = self.inner.call(request)
        with self._lock:
            self.finished.append(request.call)
        return response


class BackwardsPort:
    """Call k of a batch of n answers only once call k+1 has: the batch finishes in exactly the
    reverse of call order, which only calls running at the same time can do (one by one, call 0
    would wait for a call that has not started, for `bound_s`)."""

    def __init__(self, inner: Any, n: int, bound_s: float = 10.0) -> None:
        self.inner = inner
        self.bound_s = bound_s
        self.done = [threading.Event() for _ in range(n)]
        self.finished: list[int] = []
        self._lock = threading.Lock()

    def call(self, request: ToolRequest) -> ToolResponse:
        k = request.call
        if k + 1 < len(self.done) and not self.done[k + 1].wait(self.bound_s):
            raise AssertionError(f"call {k + 1} never finished: the calls are not concurrent")
        response: ToolResponse = self.inner.call(request)
        with self._lock:
            self.finished.append(k)
        self.done[k].set()
        return response


def log_lines(log: SessionLog) -> bytes:
    return log.log_path.read_bytes()


def names(records: Sequence[object]) -> list[str]:
    return [type(r).__name__ for r in records]


# ---- a session's turns against the scripted model (the `env` fixture is in tests/loopd/turn) ----


@dataclass
class Env:
    fake: FakeServer
    model: ScriptedModel
    home: Path

    def config(self, **loop: Any) -> Config:
        assert isinstance(self.fake.address, Path)
        return config_for(self.fake.address, self.home, **loop)


NOON = "2026-11-30T12:00:00.000Z"  # what FakeTools' clock answers in these tests


class Turns:
    """Runs turns of one session against the env, with a recording FakeTools port."""

    def __init__(self, env: Env, log: SessionLog, **loop: Any) -> None:
        self.env = env
        self.log = log
        self.config = env.config(**loop)
        self.port = RecordingPort(FakeTools(clock=lambda: NOON))
        self.clock = Ticker()
        self.events: list[TurnEvent] = []

    def run(self, text: str, *script: Said, thinking: bool = True) -> TurnDone | WireError:
        self.env.model.load(script)
        self.events = []
        return run_turn(
            self.log,
            text,
            client=Client(self.config.inference),
            port=self.port,
            registry=fake_registry(),
            config=self.config.loop,
            thinking=thinking,
            on_event=self.events.append,
            clock=self.clock,
        )

    def new_records(self, since: int) -> list[object]:
        return list(self.log.records[since:])


def echo_via_call_tool(text: str) -> tuple[str, object]:
    return (CALL_TOOL, {"name": "echo", "arguments": {"text": text}})
