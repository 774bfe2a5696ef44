"""Shared helpers for the llama client's tests: short-limit configs, a jumping clock, stream chunks
built by hand, and an independent reader of recorded responses.

Configs go through `parse_config` (the brief: "every limit set between 50 and 200 ms through
Config"). The recording reader uses only the stdlib (`json`, slicing) and none of boxmaker's
decoders, so a recording test cannot pass because of a bug it shares with the code under test.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from boxmaker.loopd.config import InferenceConfig, parse_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.llama.types import ChatRequest, Completion
from boxmaker.proto import UserMessage
from tests.support.config import MODEL, fake_expect, fake_inference, loopd_toml
from tests.support.fakeserver import FakeServer, Outcome
from tests.support.replies import End, Reply, json_reply

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
CID = "chatcmpl-test0001"
BOUND_S = 5.0  # the bound of every wait on another thread

# Every limit between 50 and 200 ms (M2a brief, section 6). The retry waits keep the brief's
# defaults (2 s, 8 s, 30 s, 5 min): the tests that retry pass a FakeClock's sleep.
SHORT_LIMITS: dict[str, Any] = {
    "poll_ms": 50,
    "busy_wait_ms": 200,
    "load_wait_ms": 150,
    "idle_grace_ms": 100,
    "liveness_ms": 150,
    "control_timeout_ms": 200,
}


def config_text(socket: Path, **keys: Any) -> str:
    """A whole loopd.toml: [inference] with the short limits and `keys`, and an [expect]."""
    inference = fake_inference(socket, **(SHORT_LIMITS | keys))
    return loopd_toml({"inference": inference, "expect": fake_expect()})


def make_config(socket: Path, **keys: Any) -> InferenceConfig:
    return parse_config(config_text(socket, **keys), "test.toml", socket.parent).inference


def at(server: FakeServer) -> Path:
    """The socket path of a fake server started on a Unix socket."""
    assert isinstance(server.address, Path)
    return server.address


class FakeClock:
    """time.monotonic() plus an offset that `sleep` and `advance` move instead of waiting.

    Real waits (socket timeouts) still move it, so the chat loop's own deadlines work as usual.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.offset = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        with self._lock:
            return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)


# ---- stream chunks as llama-server sends them -----------------------------------------------


def chunk_obj(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
    predicted: int | None = None,
    progress: tuple[int, int, int] | None = None,
    cid: str = CID,
    cache_n: int = 3,
    prompt_n: int = 20,
) -> dict[str, Any]:
    """One chat.completion.chunk; `predicted` adds timings with that predicted_n."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    obj: dict[str, Any] = {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 1796011468,
        "id": cid,
        "model": MODEL,
        "object": "chat.completion.chunk",
    }
    if predicted is not None:
        obj["timings"] = {
            "cache_n": cache_n,
            "prompt_n": prompt_n,
            "predicted_n": predicted,
            "prompt_ms": 1.5,
            "predicted_ms": 2.5,
        }
    if progress is not None:
        total, cache, processed = progress
        obj["prompt_progress"] = {
            "total": total,
            "cache": cache,
            "processed": processed,
            "time_ms": 7,
        }
    return obj


def answer_chunks(text_pieces: list[str], *, start: int = 1) -> list[dict[str, Any]]:
    """Content deltas, one token each, then the finish chunk."""
    chunks = [chunk_obj(content=t, predicted=start + i) for i, t in enumerate(text_pieces)]
    return [*chunks, chunk_obj(finish="stop", predicted=start + len(text_pieces))]


def slots_reply(busy: bool, slot: int = 0) -> Reply:
    other = 1 - slot if slot in (0, 1) else 0
    return json_reply(
        200,
        [
            {"id": slot, "n_ctx": 2048, "speculative": False, "is_processing": busy},
            {"id": other, "n_ctx": 2048, "speculative": False, "is_processing": False},
        ],
    )


LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


# ---- an independent reader of recorded responses ----------------------------------------------


@dataclass
class Recorded:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    chunks: list[dict[str, Any]] = field(default_factory=list)  # the stream's JSON chunks


def read_recording(raw: bytes) -> Recorded:
    """Splits a recorded response by hand: head, de-chunked body, then `data:` JSON objects."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = [(k.strip(), v.strip()) for k, _, v in (h.partition(":") for h in header_lines)]
    names = {k.lower(): v for k, v in headers}
    if names.get("transfer-encoding", "").lower() == "chunked":
        body, pos = b"", 0
        while True:
            eol = rest.index(b"\r\n", pos)
            size = int(rest[pos:eol], 16)
            if size == 0:
                break
            body += rest[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2
    else:
        body = rest
    rec = Recorded(int(status_line.split(" ")[1]), headers, body)
    if names.get("content-type", "").startswith("text/event-stream"):
        for event in body.decode("utf-8").split("\n\n"):
            for line in event.split("\n"):
                if line.startswith("data: ") and line != "data: [DONE]":
                    rec.chunks.append(json.loads(line[len("data: ") :]))
    return rec


def fold(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stream adds up to, folded the plain way (an oracle for `llama.assemble`)."""
    out: dict[str, Any] = {
        "id": None,
        "content": None,
        "reasoning_content": None,
        "tool_calls": {},
        "finish_reason": None,
        "timings": None,
        "reasoning_deltas": 0,
        "progress": [],
    }
    predicted_before_reasoning = None
    last_reasoning_predicted = 0
    predicted = 0
    for c in chunks:
        out["id"] = out["id"] or c.get("id")
        if "prompt_progress" in c:
            p = c["prompt_progress"]
            out["progress"].append((p["total"], p["cache"], p["processed"]))
        before = predicted
        if "timings" in c:
            t = c["timings"]
            out["timings"] = (t["cache_n"], t["prompt_n"], t["predicted_n"])
            predicted = t["predicted_n"]
        for choice in c.get("choices", []):
            delta = choice.get("delta", {})
            for key in ("content", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    out[key] = (out[key] or "") + delta[key]
            if isinstance(delta.get("reasoning_content"), str):
                out["reasoning_deltas"] += 1
                if predicted_before_reasoning is None:
                    predicted_before_reasoning = before
                last_reasoning_predicted = predicted
            for tc in delta.get("tool_calls") or []:
                call = out["tool_calls"].setdefault(
                    tc["index"], {"id": None, "name": None, "arguments": ""}
                )
                call["id"] = call["id"] or tc.get("id")
                call["name"] = call["name"] or tc.get("function", {}).get("name")
                call["arguments"] += tc.get("function", {}).get("arguments", "")
            out["finish_reason"] = out["finish_reason"] or choice.get("finish_reason")
    # The reasoning block is one run of tokens: from before its first delta to its last.
    out["reasoning_tokens"] = last_reasoning_predicted - (predicted_before_reasoning or 0)
    return out


def recording_index() -> dict[str, dict[str, Any]]:
    index = json.loads((RECORDINGS / "index.json").read_text())
    recordings: dict[str, dict[str, Any]] = index["recordings"]
    return recordings


# ---- running one chat against the fake server ------------------------------------------------

REQ = ChatRequest(0, (UserMessage("hi"),))
SILENT = Reply(pieces=(), raw=True, end=End.SILENCE)  # accepts the request, never answers
UPPER_S = 2.0  # a limit of at most 200 ms that has not fired by then never will


def client_for(server: FakeServer, **keys: Any) -> Client:
    return Client(make_config(at(server), **keys))


def run(client: Client, req: ChatRequest = REQ) -> tuple[Completion | InferError, list[Any], float]:
    """client.chat(req): the completion or the error, the events, the seconds it took."""
    events: list[Any] = []
    start = time.monotonic()
    try:
        result: Completion | InferError = client.chat(req, events.append)
    except InferError as exc:
        result = exc
    return result, events, time.monotonic() - start


def chat_connection(server: FakeServer) -> int:
    return next(c.index for c in server.connections() if c.request and c.request.path == CHAT_PATH)


def assert_client_closed(server: FakeServer) -> None:
    """The client closed the chat connection while the server still had more to say."""
    ended = server.wait_for_end(chat_connection(server), BOUND_S)
    assert ended.outcome is Outcome.CLIENT_CLOSED
