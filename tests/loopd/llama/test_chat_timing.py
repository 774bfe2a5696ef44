"""One chat request against the fake server over a real Unix socket: every InferError provoked,
with every limit between 50 and 200 ms through the config (M2a brief, section 6).

Times are checked as lower bounds (a limit never fires early) and loose upper bounds (it does
fire); no test sleeps to let something happen.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import (
    ConnectFailed,
    LoadTimeout,
    Stalled,
    StreamClosedEarly,
    WaitTimeout,
)
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.llama.types import Completion, FinishReason
from boxmaker.proto import (
    ContentEvent,
    Timings,
    WaitingEvent,
)
from tests.support.client import (
    BOUND_S,
    CID,
    LOADING,
    REQ,
    SILENT,
    UPPER_S,
    answer_chunks,
    assert_client_closed,
    chunk_obj,
    client_for,
    make_config,
    run,
    slots_reply,
)
from tests.support.config import MODEL
from tests.support.fakeserver import FakeServer
from tests.support.replies import End, Piece, Reply, json_reply, raw_reply, sse_reply

# ---- the happy path --------------------------------------------------------------------------


def test_a_streamed_answer_completes_and_the_request_is_what_was_built(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, sse_reply(answer_chunks(["Hel", "lo"]), delay_s=0.01))
    client = client_for(fake)
    result, events, _ = run(client)
    assert isinstance(result, Completion)
    assert (result.id, result.content, result.finish_reason) == (CID, "Hello", FinishReason.STOP)
    assert result.timings == Timings(3, 20, 3)
    assert events == [ContentEvent("Hel"), ContentEvent("lo")]
    sent = fake.requests(CHAT_PATH)[0]
    assert sent.body == client.request_body(REQ)
    assert sent.header("connection") == "close"
    assert fake.requests("/slots") == []  # the first byte came before the first poll


def test_a_stream_read_to_close_without_chunking(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, sse_reply(answer_chunks(["a"]), chunked=False))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, Completion)
    assert result.content == "a"


def test_a_stream_slower_than_the_poll_but_inside_liveness_is_fine(fake: FakeServer) -> None:
    # Pieces 80 ms apart: longer than poll_ms (50), shorter than liveness_ms (200).
    fake.on("POST", CHAT_PATH, sse_reply(answer_chunks(["a", "b", "c"]), delay_s=0.08))
    result, _, took = run(client_for(fake, liveness_ms=200))
    assert isinstance(result, Completion), result
    assert result.content == "abc"
    assert took >= 0.24
    assert fake.requests("/slots") == []  # after the first byte, no more polls


# ---- before the first byte -------------------------------------------------------------------


def test_busy_slot_ends_in_wait_timeout(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, SILENT)
    fake.on("GET", "/slots", slots_reply(busy=True))
    result, events, took = run(client_for(fake))
    assert isinstance(result, WaitTimeout), result
    assert "slot 0 stayed busy" in str(result)
    assert "busy_wait_ms = 200" in str(result)
    assert 0.2 <= took < UPPER_S
    assert len(events) >= 3
    assert set(events) == {WaitingEvent(slot_busy=True)}
    polls = fake.requests("/slots")
    assert len(polls) == len(events)  # one Waiting per poll
    assert all(p.query == {"model": MODEL} for p in polls)
    assert_client_closed(fake)


def test_slots_answering_503_ends_in_load_timeout(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, SILENT)
    fake.on("GET", "/slots", json_reply(503, LOADING))
    result, events, took = run(client_for(fake))
    assert isinstance(result, LoadTimeout), result
    assert "load_wait_ms = 150" in str(result)
    assert "last /slots: HTTP 503" in str(result)
    assert "Loading model" in str(result)
    assert 0.15 <= took < UPPER_S
    assert events
    assert set(events) == {WaitingEvent(slot_busy=False)}
    assert_client_closed(fake)


def test_slots_closing_without_an_answer_ends_in_load_timeout(fake: FakeServer) -> None:
    # What inferproxy does when it cannot reach the upstream: accept, then close.
    fake.on("POST", CHAT_PATH, SILENT)
    fake.on("GET", "/slots", Reply(pieces=(), raw=True, end=End.CLOSE))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, LoadTimeout), result
    assert "closed the connection without answering" in str(result)


def test_slots_refused_ends_in_load_timeout(sock_dir: Path) -> None:
    # A listener that takes the chat connection and then goes away: /slots is refused.
    path = sock_dir / "infer.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)
    listener.settimeout(BOUND_S)
    client = Client(make_config(path))
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(run(client)))
    worker.start()
    try:
        conn, _ = listener.accept()
        listener.close()  # the file stays: connects now get ECONNREFUSED
        worker.join(BOUND_S)
        assert not worker.is_alive()
        conn.close()
    finally:
        listener.close()
    result, events, took = outcome[0]
    assert isinstance(result, LoadTimeout), result
    assert "ECONNREFUSED" in str(result)
    assert events
    assert set(events) == {WaitingEvent(slot_busy=False)}
    assert 0.15 <= took < UPPER_S


def test_idle_slot_and_no_byte_is_stalled(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, SILENT)
    fake.on("GET", "/slots", slots_reply(busy=False))
    result, events, took = run(client_for(fake))
    assert isinstance(result, Stalled), result
    assert "slot 0 is idle" in str(result)
    assert "idle_grace_ms = 100" in str(result)
    assert 0.1 <= took < UPPER_S
    assert events
    assert set(events) == {WaitingEvent(slot_busy=False)}


def test_the_poll_asks_about_our_slot(fake: FakeServer) -> None:
    # Slot 1 is busy, slot 0 (ours) idle: Waiting says not busy and the idle grace applies.
    fake.on("POST", CHAT_PATH, SILENT)
    fake.on("GET", "/slots", slots_reply(busy=True, slot=1))
    result, events, _ = run(client_for(fake))
    assert isinstance(result, Stalled)
    assert set(events) == {WaitingEvent(slot_busy=False)}


def test_a_busy_slot_that_frees_then_answers(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, sse_reply(answer_chunks(["ok"]), head_delay_s=0.1))
    fake.on("GET", "/slots", slots_reply(busy=True))
    result, events, _ = run(client_for(fake))
    assert isinstance(result, Completion)
    assert events[0] == WaitingEvent(slot_busy=True)
    assert events[-1] == ContentEvent("ok")


def test_connection_cut_before_any_byte_is_connect_failed(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, Reply(pieces=(), raw=True, end=End.CUT))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, ConnectFailed), result
    assert "without answering" in str(result)


def test_missing_socket_is_connect_failed(sock_dir: Path) -> None:
    result, events, _ = run(Client(make_config(sock_dir / "gone.sock")))
    assert isinstance(result, ConnectFailed)
    assert "gone.sock" in str(result)
    assert "ENOENT" in str(result)
    assert "inferproxy" in str(result)
    assert events == []


# ---- after the first byte --------------------------------------------------------------------


def test_silence_after_the_first_byte_is_stalled(fake: FakeServer) -> None:
    chunks = [chunk_obj(progress=(50, 0, 0), predicted=0), chunk_obj(content="par", predicted=1)]
    fake.on("POST", CHAT_PATH, sse_reply(chunks, done=False, end=End.SILENCE))
    fake.on("GET", "/slots", slots_reply(busy=True))
    result, events, took = run(client_for(fake))
    assert isinstance(result, Stalled), result
    assert "liveness_ms" in str(result)
    assert 0.15 <= took < UPPER_S
    assert events[-1] == ContentEvent("par")
    assert fake.requests("/slots") == []  # liveness, not the first-byte polls
    assert_client_closed(fake)


def test_silence_inside_the_head_is_stalled(fake: FakeServer) -> None:
    fake.on(
        "POST",
        CHAT_PATH,
        Reply(pieces=(Piece(0, b"HTTP/1.1 200 OK\r\nServ"),), raw=True, end=End.SILENCE),
    )
    result, _, took = run(client_for(fake))
    assert isinstance(result, Stalled), result
    assert "response head was not complete" in str(result)
    assert took >= 0.15


def test_done_without_finish_reason_is_stream_closed_early(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, sse_reply([chunk_obj(content="a", predicted=1)]))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, StreamClosedEarly), result
    assert "without a finish_reason" in str(result)


def test_close_in_the_middle_of_a_chunked_stream_is_stream_closed_early(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, sse_reply([chunk_obj(content="a", predicted=1)], done=False))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, StreamClosedEarly), result
    assert "the stream was cut" in str(result)


def test_cut_connection_mid_chunk_is_stream_closed_early(fake: FakeServer) -> None:
    whole = sse_reply(answer_chunks(["a", "b"])).payload()
    fake.on("POST", CHAT_PATH, raw_reply(whole[: len(whole) // 2 + 7], end=End.CUT))
    result, _, _ = run(client_for(fake))
    assert isinstance(result, StreamClosedEarly), result


def test_what_follows_the_finish_reason_cannot_spoil_the_completion(fake: FakeServer) -> None:
    # The finish chunk, then silence instead of [DONE]: the completion is whole already.
    fake.on("POST", CHAT_PATH, sse_reply(answer_chunks(["a"]), done=False, end=End.SILENCE))
    result, _, took = run(client_for(fake))
    assert isinstance(result, Completion)
    assert result.content == "a"
    assert took >= 0.15  # it did wait for the rest, up to the liveness limit
