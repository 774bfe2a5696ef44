"""boxmaker.loopd.llama.transport over real Unix sockets: connect failures, reads with timeouts, and
`exchange` (one short request read whole) against the fake server."""

from __future__ import annotations

import errno
import socket
import time
from pathlib import Path

import orjson
import pytest

from boxmaker.loopd.llama.errors import BadResponse, ConnectFailed, Stalled
from boxmaker.loopd.llama.transport import Connection, Response, exchange
from tests.support.client import RECORDINGS, at
from tests.support.fakeserver import FakeServer
from tests.support.replies import End, Piece, Reply, json_reply, raw_reply


def call(server: FakeServer, method: str, target: str, body: bytes | None = None) -> Response:
    """exchange() with the short limits: 200 ms in all, 16 KiB of head, 4 MiB of body."""
    return exchange(
        at(server),
        method,
        target,
        body,
        timeout_ms=200,
        max_header_bytes=16_384,
        max_body_bytes=4_194_304,
    )


def test_missing_socket_names_the_path_the_errno_and_a_hint(sock_dir: Path) -> None:
    path = sock_dir / "nobody.sock"
    with pytest.raises(ConnectFailed) as caught:
        Connection.open(path, 0.2)
    message = str(caught.value)
    assert str(path) in message
    assert "ENOENT" in message
    assert "is inferproxy running" in message


def test_socket_file_with_no_listener_is_refused(sock_dir: Path) -> None:
    path = sock_dir / "stale.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # the file exists, nobody listens: what a dead inferproxy leaves
    stale.close()
    with pytest.raises(ConnectFailed, match=f"{errno.errorcode[errno.ECONNREFUSED]}"):
        Connection.open(path, 0.2)


def test_recv_returns_none_on_timeout_and_empty_at_eof(fake: FakeServer) -> None:
    fake.on("GET", "/x", Reply(pieces=(Piece(0.15, b"late"),), raw=True))
    with Connection.open(at(fake), 1.0) as conn:
        conn.send(b"GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n", 1.0)
        start = time.monotonic()
        assert conn.recv(0.05) is None
        assert time.monotonic() - start >= 0.05
        got = b""
        while (piece := conn.recv(1.0)) != b"":
            assert piece is not None, "no EOF within the bound"
            got += piece
        assert got == b"late"
    assert conn.closed


def test_exchange_reads_a_chunked_json_body(fake: FakeServer) -> None:
    raw = (RECORDINGS / "router_slots.http").read_bytes()
    fake.on("GET", "/slots", raw_reply(raw, every=7))
    resp = call(fake, "GET", "/slots?model=m", None)
    assert resp.status == 200
    assert [s["id"] for s in orjson.loads(resp.body)] == [0, 1]
    req = fake.requests("/slots")[0]
    assert req.target == "/slots?model=m"
    assert req.header("connection") == "close"


def test_exchange_posts_json_with_a_length(fake: FakeServer) -> None:
    fake.on("POST", "/tokenize", json_reply(200, {"tokens": [1, 2]}))
    resp = call(fake, "POST", "/tokenize", b'{"content":"hi"}')
    assert orjson.loads(resp.body) == {"tokens": [1, 2]}
    req = fake.requests("/tokenize")[0]
    assert req.json == {"content": "hi"}
    assert req.header("content-type") == "application/json"
    assert req.header("content-length") == "16"


def test_exchange_that_does_not_finish_in_time_is_stalled(fake: FakeServer) -> None:
    fake.on("GET", "/slots", Reply(pieces=(), raw=True, end=End.SILENCE))
    start = time.monotonic()
    with pytest.raises(Stalled, match="GET /slots: no complete answer within 200 ms"):
        call(fake, "GET", "/slots", None)
    assert 0.2 <= time.monotonic() - start < 2.0


def test_exchange_deadline_covers_a_slow_body_not_just_each_read(fake: FakeServer) -> None:
    # Each piece comes within the per-read time, but the whole takes longer than the deadline.
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"
    pieces = (Piece(0, head), *(Piece(0.08, b"x") for _ in range(4)))
    fake.on("GET", "/slow", Reply(pieces=pieces, raw=True))
    with pytest.raises(Stalled):
        call(fake, "GET", "/slow", None)


def test_exchange_body_cut_short_is_a_bad_response(fake: FakeServer) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"
    fake.on("GET", "/cut", Reply(pieces=(Piece(0, head),), raw=True, end=End.CUT))
    with pytest.raises(BadResponse, match="GET /cut: the connection closed 7 bytes before"):
        call(fake, "GET", "/cut", None)


def test_exchange_closed_without_an_answer_is_a_connect_failure(fake: FakeServer) -> None:
    fake.on("GET", "/slots", Reply(pieces=(), raw=True, end=End.CLOSE))
    with pytest.raises(ConnectFailed, match="closed the connection without answering"):
        call(fake, "GET", "/slots", None)


def test_exchange_caps_a_body(fake: FakeServer) -> None:
    fake.on("GET", "/big", json_reply(200, {"x": "a" * 200}, chunked=True))
    with pytest.raises(BadResponse, match="longer than 100 bytes"):
        exchange(
            at(fake),
            "GET",
            "/big",
            None,
            timeout_ms=200,
            max_header_bytes=16_384,
            max_body_bytes=100,
        )
