"""The fake llama-server, exercised with plain sockets (the real client is tested against it later).

Delays are small (50-100 ms) and only ever checked as lower bounds, which hold however loaded the
machine is; every wait is bounded.
"""

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.fakeserver import FakeServer, FakeServerError, Outcome
from tests.support.recorded import Recorded
from tests.support.replies import (
    LAST_CHUNK,
    End,
    Event,
    Piece,
    Reply,
    chunk,
    json_reply,
    raw_reply,
    split,
    sse_reply,
)

BOUND_S = 5.0
RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"


def request(
    method: str,
    target: str,
    body: bytes | None = None,
    *,
    headers: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """A request as loopd's client sends it: one per connection, Connection: close."""
    lines = [f"{method} {target} HTTP/1.1", "Host: localhost", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def read_to_end(sock: socket.socket) -> tuple[bytes, str]:
    """Reads until EOF or a reset; returns what arrived and "eof" or "reset"."""
    data = bytearray()
    while True:
        try:
            piece = sock.recv(65_536)
        except ConnectionResetError:
            return bytes(data), "reset"
        if not piece:
            return bytes(data), "eof"
        data += piece


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        piece = sock.recv(size - len(data))
        assert piece, f"EOF after {len(data)} of {size} bytes"
        data += piece
    return bytes(data)


def exchange(server: FakeServer, raw: bytes) -> bytes:
    with server.connect() as sock:
        sock.sendall(raw)
        data, how = read_to_end(sock)
    assert how == "eof"
    return data


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body_of(response: bytes) -> bytes:
    return response.partition(b"\r\n\r\n")[2]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeServer]:
    with FakeServer(tmp_path / "infer.sock") as srv:
        yield srv


@pytest.fixture(params=["unix", "tcp"])
def any_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FakeServer]:
    address = tmp_path / "infer.sock" if request.param == "unix" else ("127.0.0.1", 0)
    with FakeServer(address) as srv:
        yield srv


def test_sse_reply_has_llama_server_framing() -> None:
    # Written out by hand: each event in its own chunk, then [DONE], then the last chunk.
    reply = sse_reply([{"a": 1}, b": comment\n\n"])
    assert reply.payload() == (
        b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nAccess-Control-Allow-Origin: \r\n"
        b"X-Accel-Buffering: no\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b'f\r\ndata: {"a":1}\n\n\r\n'
        b"b\r\n: comment\n\n\r\n"
        b"e\r\ndata: [DONE]\n\n\r\n"
        b"0\r\n\r\n"
    )
    unchunked = sse_reply([{"a": 1}], chunked=False, done=False)
    assert body_of(unchunked.payload()) == b'data: {"a":1}\n\n'
    assert b"Transfer-Encoding" not in unchunked.head()


def test_json_reply_with_length_or_chunked() -> None:
    plain = json_reply(503, {"error": {"message": "Loading model"}})
    assert plain.head().startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"\r\nContent-Length: 37\r\n" in plain.head()
    assert body_of(plain.payload()) == b'{"error":{"message":"Loading model"}}'

    chunked = json_reply(200, {"ok": True}, chunked=True)
    assert b"Content-Length" not in chunked.head()
    assert body_of(chunked.payload()) == chunk(b'{"ok":true}') + LAST_CHUNK


def test_split_cuts_at_offsets_and_every_n_bytes() -> None:
    assert split(b"abcdefgh", [3, 3, 0, 99], delay_s=0.1) == (
        Piece(0.0, b"abc"),
        Piece(0.1, b"defgh"),
    )
    assert [p.data for p in split(b"abcdefgh", every=3)] == [b"abc", b"def", b"gh"]
    assert split(b"", [1]) == (Piece(0.0, b""),)


def test_sse_reply_arrives_byte_for_byte(any_server: FakeServer) -> None:
    events: list[Event] = [
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"content": "lo ünïcode"}}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": {"cache_n": 0}},
    ]
    reply = sse_reply(events)
    any_server.expect("POST", "/v1/chat/completions", reply)
    body = orjson.dumps({"model": "smol", "stream": True})
    got = exchange(any_server, request("POST", "/v1/chat/completions", body))
    assert got == reply.payload()
    assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert any_server.pending() == {}


def test_delays_between_pieces_are_honoured(server: FakeServer) -> None:
    pieces = [Piece(0.0, b"abc"), Piece(0.05, b"def"), Piece(0.05, b"ghi")]
    reply = Reply(headers=[("Content-Length", "9")], pieces=pieces)
    server.expect("GET", "/t", reply)
    head = len(reply.head())
    with server.connect() as sock:
        sent_at = time.monotonic()
        sock.sendall(request("GET", "/t"))
        arrivals: list[tuple[float, int]] = []  # (seconds after the request, bytes so far)
        total = 0
        while piece := sock.recv(65_536):
            total += len(piece)
            arrivals.append((time.monotonic() - sent_at, total))
    assert total == len(reply.payload())

    def first_time_holding(size: int) -> float:
        return next(t for t, so_far in arrivals if so_far >= size)

    assert first_time_holding(head + 4) >= 0.05  # "d" only after one delay
    assert first_time_holding(head + 7) >= 0.10  # "g" only after both


def test_head_delay_holds_the_first_byte(server: FakeServer) -> None:
    server.expect("GET", "/slow", Reply(head_delay_s=0.08))
    with server.connect() as sock:
        sent_at = time.monotonic()
        sock.sendall(request("GET", "/slow"))
        assert sock.recv(1) == b"H"
        assert time.monotonic() - sent_at >= 0.08


def test_cut_ends_the_body_early(any_server: FakeServer) -> None:
    reply = Reply(headers=[("Content-Length", "100")], pieces=[Piece(0, b"x" * 10)], end=End.CUT)
    any_server.expect("GET", "/cut", reply)
    with any_server.connect() as sock:
        sock.sendall(request("GET", "/cut"))
        data, how = read_to_end(sock)
    assert reply.payload().startswith(data)
    assert len(body_of(data)) < 100
    # TCP has a reset (SO_LINGER 0); a Unix socket has none, so the client sees an early EOF.
    assert how == ("eof" if isinstance(any_server.address, Path) else "reset")
    assert any_server.wait_for_end(0).outcome is Outcome.DONE


def test_silence_keeps_the_connection_open_until_close(any_server: FakeServer) -> None:
    reply = Reply(
        headers=[("Content-Length", "50")], pieces=[Piece(0, b"partial")], end=End.SILENCE
    )
    any_server.expect("POST", "/v1/chat/completions", reply)
    with any_server.connect() as sock:
        sock.sendall(request("POST", "/v1/chat/completions", b"{}"))
        assert read_exactly(sock, len(reply.payload())) == reply.payload()  # sent before the end
        sock.settimeout(0.1)
        with pytest.raises(TimeoutError):
            sock.recv(1)
        assert any_server.connections()[0].outcome is Outcome.OPEN
        closed_at = time.monotonic()
        any_server.close()
        assert time.monotonic() - closed_at < BOUND_S
        sock.settimeout(BOUND_S)
        assert sock.recv(1) == b""
    assert any_server.connections()[0].outcome is Outcome.STOPPED


def test_silence_ends_when_the_client_closes(server: FakeServer) -> None:
    server.expect("GET", "/hang", Reply(end=End.SILENCE))
    with server.connect() as sock:
        sock.sendall(request("GET", "/hang"))
        assert read_exactly(sock, len(Reply().head())) == Reply().head()
    ended = server.wait_for_end(0)
    assert ended.outcome is Outcome.CLIENT_CLOSED
    assert ended.request is not None
    assert ended.request.path == "/hang"


def test_client_closing_during_a_delay_is_seen_at_once(server: FakeServer) -> None:
    server.expect("GET", "/slow", Reply(pieces=[Piece(30.0, b"never")]))
    with server.connect() as sock:
        sock.sendall(request("GET", "/slow"))
        read_exactly(sock, len(Reply().head()))
    assert server.wait_for_end(0).outcome is Outcome.CLIENT_CLOSED


def test_close_ends_a_long_delay_promptly(server: FakeServer) -> None:
    server.expect("GET", "/slow", Reply(pieces=[Piece(30.0, b"never")]))
    with server.connect() as sock:
        sock.sendall(request("GET", "/slow"))
        read_exactly(sock, len(Reply().head()))
        closed_at = time.monotonic()
        server.close()
        assert time.monotonic() - closed_at < BOUND_S
        assert read_to_end(sock) == (b"", "eof")
    assert server.connections()[0].outcome is Outcome.STOPPED


def test_requests_are_recorded_in_order_with_json_bodies(server: FakeServer) -> None:
    server.on("POST", "/v1/chat/completions", json_reply(200, {"ok": True}))
    server.on("GET", "/slots", json_reply(200, []))
    before = time.monotonic()
    chat = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "id_slot": 0}
    exchange(
        server,
        request(
            "POST",
            "/v1/chat/completions",
            orjson.dumps(chat),
            headers=(("Content-Type", "application/json"),),
        ),
    )
    exchange(server, request("GET", "/slots?model=smol&fail_on_no_slot=1"))
    first, second = server.wait_for_requests(2)
    assert before <= first.received_at <= second.received_at <= time.monotonic()
    assert (first.index, first.method, first.path, first.target) == (
        0,
        "POST",
        "/v1/chat/completions",
        "/v1/chat/completions",
    )
    assert first.json == chat
    assert first.body == orjson.dumps(chat)
    assert first.header("content-type") == "application/json"
    assert first.header("CONNECTION") == "close"
    assert ("Host", "localhost") in first.headers
    assert (second.index, second.method, second.path) == (1, "GET", "/slots")
    assert second.target == "/slots?model=smol&fail_on_no_slot=1"
    assert second.query == {"model": "smol", "fail_on_no_slot": "1"}
    assert second.json is None
    assert second.body == b""
    assert server.requests("/slots") == [second]
    assert [c.request for c in server.connections()] == [first, second]


def test_chunked_request_body_is_decoded(server: FakeServer) -> None:
    server.on("POST", "/tokenize", json_reply(200, {"tokens": [1, 2]}))
    body = b'{"content": "hello"}'
    chunked = chunk(body[:5]) + chunk(body[5:]) + b"0\r\nX-Trailer: 1\r\n\r\n"
    raw = request("POST", "/tokenize", headers=(("Transfer-Encoding", "chunked"),)) + chunked
    assert status_of(exchange(server, raw)) == 200
    (recorded,) = server.wait_for_requests(1)
    assert recorded.body == body
    assert recorded.json == {"content": "hello"}


def test_unscripted_request_answers_500_and_close_reports_it(tmp_path: Path) -> None:
    server = FakeServer(tmp_path / "infer.sock")
    response = exchange(server, request("GET", "/health?model=smol"))
    assert status_of(response) == 500
    assert b"nothing scripted for GET /health?model=smol" in body_of(response)
    with pytest.raises(FakeServerError, match="unexpected request: GET /health"):
        server.close()


def test_take_unexpected_acknowledges_what_a_test_provoked(server: FakeServer) -> None:
    server.expect("POST", "/x", json_reply(200, {"n": 1}), json_reply(201, {"n": 2}))
    statuses = [status_of(exchange(server, request("POST", "/x", b"{}"))) for _ in range(3)]
    assert statuses == [200, 201, 500]  # FIFO, then nothing is left
    assert server.pending() == {}
    assert server.take_unexpected() == ["POST /x"]
    assert server.take_unexpected() == []


def test_on_answers_any_number_of_times_from_a_handler(server: FakeServer) -> None:
    def slots(req: Recorded) -> Reply:
        busy = len(server.requests("/slots")) < 3  # busy for the first two polls
        return json_reply(200, [{"id": 0, "is_processing": busy, "model": req.query["model"]}])

    server.on("GET", "/slots", slots)
    answers = [
        orjson.loads(body_of(exchange(server, request("GET", "/slots?model=m")))) for _ in range(4)
    ]
    assert [a[0]["is_processing"] for a in answers] == [True, True, False, False]
    assert answers[0][0]["model"] == "m"


def test_expect_queue_comes_before_on(server: FakeServer) -> None:
    server.on("GET", "/props", json_reply(200, {"n": "always"}))
    server.expect("GET", "/props", json_reply(503, {"n": "once"}))
    statuses = [status_of(exchange(server, request("GET", "/props"))) for _ in range(3)]
    assert statuses == [503, 200, 200]


def test_handler_error_answers_500_and_close_reports_it(tmp_path: Path) -> None:
    server = FakeServer(tmp_path / "infer.sock")

    def broken(_req: Recorded) -> Reply:
        raise ValueError("a bug in the test's handler")

    server.on("GET", "/boom", broken)
    assert status_of(exchange(server, request("GET", "/boom"))) == 500
    with pytest.raises(FakeServerError, match="ValueError: a bug in the test's handler"):
        server.close()


def test_raw_reply_is_byte_identical(any_server: FakeServer) -> None:
    # Shaped like a router's forwarded answer: Connection: close twice, a chunked JSON body.
    raw = (
        b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nConnection: close\r\n"
        b"Content-Type: application/json; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunk(b'{"error":{"code":400,"type":"exceed_context_size_error"}}')
        + LAST_CHUNK
    )
    any_server.expect("POST", "/v1/chat/completions", raw_reply(raw, every=7, delay_s=0.001))
    any_server.expect("POST", "/v1/chat/completions", raw_reply(raw, [1, 2, 50]))
    for _ in range(2):
        assert exchange(any_server, request("POST", "/v1/chat/completions", b"{}")) == raw


def dechunk(body: bytes) -> list[bytes]:
    """The chunks of a chunked body, by a parser written for this test alone."""
    chunks: list[bytes] = []
    pos = 0
    while True:
        line_end = body.index(b"\r\n", pos)
        size = int(body[pos:line_end], 16)
        start = line_end + 2
        if size == 0:
            assert body[start:] == b"\r\n"
            return chunks
        chunks.append(body[start : start + size])
        assert body[start + size : start + size + 2] == b"\r\n"
        pos = start + size + 2


def test_every_recording_replays_byte_for_byte(server: FakeServer) -> None:
    recordings = sorted(RECORDINGS.glob("*.http"))
    assert recordings, f"no recordings in {RECORDINGS}"
    for path in recordings:
        server.expect("POST", "/replay", raw_reply(path.read_bytes(), every=4096))
    for path in recordings:
        got = exchange(server, request("POST", "/replay", b"{}"))
        assert got == path.read_bytes(), path.name


def test_helpers_frame_replies_as_the_real_server_did() -> None:
    # The same events and objects, framed by the helpers, give the recorded bytes back.
    stream = (RECORDINGS / "plain.http").read_bytes()
    events = dechunk(stream.partition(b"\r\n\r\n")[2])
    assert events[-1] == b"data: [DONE]\n\n"
    assert len(events) > 3
    assert sse_reply(events[:-1]).payload() == stream
    for name, status in [("too_long", 400), ("slots", 200)]:
        raw = (RECORDINGS / f"{name}.http").read_bytes()
        assert json_reply(status, orjson.loads(body_of(raw))).payload() == raw, name


def test_concurrent_connections_are_served_in_parallel(server: FakeServer) -> None:
    def first(_req: Recorded) -> Reply:
        # Answers only once the second request has arrived: a serial server would never get it.
        server.wait_for_requests(1, "/second", timeout=BOUND_S)
        return json_reply(200, {"first": True})

    server.on("GET", "/first", first)
    server.on("GET", "/second", json_reply(200, {"second": True}))
    results: dict[str, bytes] = {}

    def call(path: str) -> None:
        results[path] = exchange(server, request("GET", path))

    one = threading.Thread(target=call, args=("/first",))
    one.start()
    server.wait_for_requests(1, "/first")
    call("/second")
    one.join(BOUND_S)
    assert not one.is_alive()
    assert orjson.loads(body_of(results["/first"])) == {"first": True}
    assert orjson.loads(body_of(results["/second"])) == {"second": True}


def test_client_leaving_mid_request_does_not_break_the_server(server: FakeServer) -> None:
    with server.connect() as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
    assert server.wait_for_end(0).outcome is Outcome.INCOMPLETE
    with server.connect() as sock:
        sock.sendall(b"GET /slots HTT")
    assert server.wait_for_end(1).outcome is Outcome.INCOMPLETE
    server.on("GET", "/slots", json_reply(200, []))
    assert status_of(exchange(server, request("GET", "/slots"))) == 200
    assert [r.path for r in server.requests()] == ["/slots"]


def test_malformed_request_answers_400_and_is_reported(server: FakeServer) -> None:
    response = exchange(server, b"NONSENSE\r\n\r\n")
    assert status_of(response) == 400
    assert b"bad request line 'NONSENSE'" in body_of(response)
    assert server.wait_for_end(0).outcome is Outcome.MALFORMED
    (problem,) = server.take_unexpected()
    assert "malformed request on connection 0" in problem


def test_close_removes_the_socket_file_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "infer.sock"
    with FakeServer(path) as server:
        assert path.is_socket()
    assert not path.exists()
    server.close()
    with pytest.raises(FileNotFoundError), socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))


def test_exception_in_the_with_block_is_not_masked(tmp_path: Path) -> None:
    def failing_test() -> None:
        with FakeServer(tmp_path / "infer.sock") as server:
            exchange(server, request("GET", "/nope"))
            raise ValueError("the test's own failure")

    with pytest.raises(ValueError, match="the test's own failure") as info:
        failing_test()
    assert "unexpected request: GET /nope" in "".join(info.value.__notes__)


def test_wait_for_requests_fails_with_what_it_saw(server: FakeServer) -> None:
    server.on("GET", "/slots", json_reply(200, []))
    exchange(server, request("GET", "/slots"))
    with pytest.raises(AssertionError, match=r"1 request\(s\) to /v1/chat.*\['GET /slots'\]"):
        server.wait_for_requests(1, "/v1/chat/completions", timeout=0.05)


def test_script_function_answers_what_nothing_else_routes(tmp_path: Path) -> None:
    def script(req: Recorded) -> Reply:
        return json_reply(200, {"echo": f"{req.method} {req.path}"})

    with FakeServer(tmp_path / "infer.sock", script=script) as server:
        server.expect("GET", "/props", json_reply(503, {}))
        assert status_of(exchange(server, request("GET", "/props"))) == 503
        response = exchange(server, request("DELETE", "/anything?x=1"))
        assert orjson.loads(body_of(response)) == {"echo": "DELETE /anything"}
