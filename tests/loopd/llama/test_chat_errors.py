"""One chat request against the fake server over a real Unix socket, continued from
test_chat_timing.py: error statuses, protocol breaches, the thinking cap and the slot gate, with
the same short limits (50 to 200 ms, through the config).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import BadResponse, Busy, HttpStatus, ThinkingOverrun
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.llama.info import CONTROL_PATH
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.llama.types import ChatRequest, Completion, OnEvent
from boxmaker.proto import (
    QueuedEvent,
    ReasoningEvent,
    ThinkingCappedEvent,
    UserMessage,
)
from tests.support.client import (
    BOUND_S,
    CID,
    LOADING,
    RECORDINGS,
    REQ,
    answer_chunks,
    assert_client_closed,
    at,
    chunk_obj,
    client_for,
    make_config,
    read_recording,
    run,
)
from tests.support.config import MODEL
from tests.support.fakeserver import FakeServer
from tests.support.replies import End, Reply, chunk, json_reply, raw_reply, sse_reply

# ---- error statuses --------------------------------------------------------------------------


def test_http_400_keeps_the_status_and_body(fake: FakeServer) -> None:
    raw = (RECORDINGS / "too_long.http").read_bytes()
    fake.on("POST", CHAT_PATH, raw_reply(raw))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, HttpStatus)
    assert result.status == 400
    assert result.body == read_recording(raw).body.decode()
    assert "exceed_context_size_error" in result.body


def test_http_503_loading_from_a_router(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, raw_reply((RECORDINGS / "loading.http").read_bytes(), every=9))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, HttpStatus)
    assert (result.status, orjson.loads(result.body)) == (503, LOADING)


def test_error_body_is_capped_at_4_kib(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, json_reply(500, {"error": "é" * 10_000}, chunked=True))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, HttpStatus)
    assert result.status == 500
    assert len(result.body.encode()) <= 4096 + 3  # a cut character becomes one U+FFFD
    assert result.body.startswith('{"error":"éé')


def test_error_object_inside_the_stream(fake: FakeServer) -> None:
    err = {"error": {"code": 500, "message": "context shift failed", "type": "server_error"}}
    fake.on("POST", CHAT_PATH, sse_reply([chunk_obj(content="a", predicted=1), err]))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, HttpStatus)
    assert result.status == 500
    assert "context shift failed" in result.body


# ---- the protocol ----------------------------------------------------------------------------

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 17_000 + b"\r\n\r\n", "head longer than 16384"),
        (STREAM_HEAD + b"\r\nzz\r\ndata: {}\r\n", "chunked body: invalid chunk size line"),
        (STREAM_HEAD + b"\r\n" + chunk(b"data: {oops\n\n"), "a stream chunk is not JSON"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
            "Content-Type 'application/json', not a stream",
        ),
        (b"HTTP/2 200\r\n\r\n", "not an HTTP/1.x status line"),
    ],
    ids=["head-over-16k", "bad-chunk", "not-json", "not-a-stream", "status-line"],
)
def test_protocol_breaches_are_bad_responses(fake: FakeServer, raw: bytes, message: str) -> None:
    fake.on("POST", CHAT_PATH, raw_reply(raw, end=End.SILENCE))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, BadResponse), result  # found at once: a timeout would be Stalled
    assert message in str(result)


def test_sse_line_over_the_cap_is_a_bad_response(fake: FakeServer) -> None:
    fake.on(
        "POST",
        CHAT_PATH,
        sse_reply([chunk_obj(content="x" * 2000, predicted=1)], end=End.SILENCE, done=False),
    )
    result, _, _ = run(client_for(fake, max_sse_line_bytes=1024))
    assert isinstance(result, BadResponse), result
    assert "SSE line longer than 1024 bytes" in str(result)


# ---- the thinking cap ------------------------------------------------------------------------


def reasoning(n: int, start: int = 1) -> list[dict[str, Any]]:
    return [chunk_obj(reasoning=f" r{i}", predicted=i) for i in range(start, start + n)]


def test_thinking_cap_posts_reasoning_end_and_the_answer_follows(fake: FakeServer) -> None:
    # Cap 5, overrun 4: reasoning stops 2 tokens after the cap, then the answer.
    chunks = reasoning(7) + answer_chunks(["Yes"], start=8)
    fake.on("POST", CHAT_PATH, sse_reply(chunks))
    fake.on("POST", CONTROL_PATH, json_reply(200, {"success": True}))
    result, events, _ = run(client_for(fake, thinking_cap=5, thinking_overrun=4))
    assert isinstance(result, Completion), result
    assert result.thinking_capped is True
    assert result.reasoning_tokens == 7
    assert result.reasoning_content == " r1 r2 r3 r4 r5 r6 r7"
    assert result.content == "Yes"
    at = events.index(ThinkingCappedEvent(5))
    assert events[at - 1] == ReasoningEvent(" r5")
    assert events[at + 1] == ReasoningEvent(" r6")
    (control,) = fake.requests(CONTROL_PATH)
    assert control.json == {"id": CID, "action": "reasoning_end", "model": MODEL}
    assert control.connection != fake.requests(CHAT_PATH)[0].connection  # a second connection


def test_reasoning_past_cap_plus_overrun_is_thinking_overrun(fake: FakeServer) -> None:
    chunks = [*reasoning(9), chunk_obj(reasoning=" more", predicted=10)]
    fake.on("POST", CHAT_PATH, sse_reply(chunks, delay_s=0.005, done=False, end=End.SILENCE))
    fake.on("POST", CONTROL_PATH, json_reply(200, {"success": True}))
    result, events, _ = run(client_for(fake, thinking_cap=5, thinking_overrun=4))
    assert isinstance(result, ThinkingOverrun), result
    assert "went on for 4 tokens after reasoning_end was posted at 5" in str(result)
    assert ThinkingCappedEvent(5) in events
    assert events[-1] == ReasoningEvent(" r9")  # stopped at the token that overran
    assert len(fake.requests(CONTROL_PATH)) == 1
    assert_client_closed(fake)  # closing is what cancels the generation


@pytest.mark.parametrize(
    ("control", "message"),
    [
        (
            json_reply(200, {"success": False, "message": "no such completion"}),
            "the server refused reasoning_end: no such completion",
        ),
        (json_reply(404, {"error": {"message": "Not Found"}}), "reasoning_end answered HTTP 404"),
        (
            Reply(pieces=(), raw=True, end=End.SILENCE),
            "the reasoning_end call failed: POST /v1/chat/completions/control: no complete answer",
        ),
    ],
    ids=["refused", "http-404", "silent"],
)
def test_a_control_call_that_fails_is_thinking_overrun(
    fake: FakeServer, control: Reply, message: str
) -> None:
    fake.on("POST", CHAT_PATH, sse_reply(reasoning(8), done=False, end=End.SILENCE))
    fake.on("POST", CONTROL_PATH, control)
    result, events, _ = run(client_for(fake, thinking_cap=5, thinking_overrun=4))
    assert isinstance(result, ThinkingOverrun), result
    assert "reasoning reached 5 tokens (thinking_cap = 5)" in str(result)
    assert message in str(result)
    assert not any(isinstance(e, ThinkingCappedEvent) for e in events)
    assert_client_closed(fake)


# ---- the gate --------------------------------------------------------------------------------


def test_busy_from_the_gate_and_a_queued_request_that_then_runs(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, sse_reply(answer_chunks(["done"])))
    gate = SlotGate(queue_length=1)
    config = make_config(at(fake), queue_length=1)
    waiter, third = Client(config, gate=gate), Client(config, gate=gate)
    queued = threading.Event()
    outcome: list[Any] = []

    def on_event(event: Any) -> None:
        outcome.append(event)
        if isinstance(event, QueuedEvent):
            queued.set()

    def wait_in_line() -> None:
        outcome.append(waiter.chat(REQ, on_event))

    with gate.hold(0, lambda e: None):  # another session's request holds slot 0
        worker = threading.Thread(target=wait_in_line)
        worker.start()
        assert queued.wait(BOUND_S)
        tried: list[Any] = []
        attempt = threading.Thread(target=lambda: tried.append(run(third)))
        attempt.start()
        attempt.join(BOUND_S)  # a gate that let it wait would hold it here: bounded
        assert tried, "the third request was not refused at once"
        result, events, _ = tried[0]
        assert isinstance(result, Busy), result
        assert "queue_length = 1" in str(result)
        assert events == []
        assert fake.requests(CHAT_PATH) == []  # neither reached the server yet
    worker.join(BOUND_S)
    assert not worker.is_alive()
    assert outcome[0] == QueuedEvent(ahead=1)
    assert isinstance(outcome[-1], Completion)
    assert len(fake.requests(CHAT_PATH)) == 1


class RecordingGate:
    """Another Gate: a SlotGate that notes each hold's slot and whether it was given back."""

    def __init__(self) -> None:
        self.inner = SlotGate(queue_length=1)
        self.log: list[str] = []

    @contextmanager
    def hold(self, slot: int, on_event: OnEvent) -> Iterator[None]:
        with self.inner.hold(slot, on_event):
            self.log.append(f"hold {slot}")
            try:
                yield
            finally:
                self.log.append(f"release {slot}")


def test_the_client_takes_any_gate_and_gives_it_back_on_error(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, sse_reply(answer_chunks(["done"])))
    gate = RecordingGate()
    client = Client(make_config(at(fake)), gate=gate)
    result, _, _ = run(client)
    assert isinstance(result, Completion)
    fake.on("POST", CHAT_PATH, json_reply(500, {"error": "boom"}))
    result, _, _ = run(client, ChatRequest(1, (UserMessage("x"),)))
    assert isinstance(result, HttpStatus)
    assert gate.log == ["hold 0", "release 0", "hold 1", "release 1"]


def test_a_slot_not_in_the_config_is_refused_before_anything(fake: FakeServer) -> None:
    with pytest.raises(ValueError, match=r"slot 5 is not one of \[inference\] slots \(0, 1\)"):
        client_for(fake).chat(ChatRequest(5, (UserMessage("x"),)), lambda e: None)
    assert fake.requests() == []
