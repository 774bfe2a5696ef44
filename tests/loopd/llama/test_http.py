"""boxmaker.loopd.llama.http: request bytes, the response head parser and the body framings. No I/O.

Every case is fed whole, byte by byte and in thirds (tests/support/feed.py), since a socket may
cut a response anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from boxmaker.loopd.llama.errors import BadResponse, ConnectFailed
from boxmaker.loopd.llama.http import (
    BodyDecoder,
    ChunkedBody,
    CloseBody,
    EmptyBody,
    HeadParser,
    LengthBody,
    ResponseHead,
    TruncatedBody,
    body_decoder,
    build_request,
    content_type,
    target,
)
from boxmaker.proto import NEED_DATA
from tests.support.client import RECORDINGS
from tests.support.feed import FEED_MODES, pieces_at

MODES = list(FEED_MODES)


def split_by(mode: str, data: bytes) -> list[bytes]:
    if mode == "whole":
        return [data]
    if mode == "bytewise":
        return [data[i : i + 1] for i in range(len(data))]
    return pieces_at(data, [len(data) // 3, 2 * len(data) // 3])


def parse(data: bytes, mode: str = "whole", max_header_bytes: int = 16_384) -> tuple[Any, bytes]:
    """Feeds `data` (then EOF) to a HeadParser; returns the head and the bytes after it."""
    parser = HeadParser(max_header_bytes)
    for piece in [*split_by(mode, data), b""]:
        parser.receive_data(piece)
        head = parser.next_head()
        if head is not NEED_DATA:
            return head, parser.rest
    raise AssertionError("unreachable: EOF before a head raises")


# ---- requests ----------------------------------------------------------------------------------


def test_post_request_golden() -> None:
    assert build_request("POST", "/v1/chat/completions", b'{"a":1}') == (
        b"POST /v1/chat/completions HTTP/1.1\r\n"
        b"Host: localhost\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: 7\r\n"
        b"Accept-Encoding: identity\r\n"
        b"Connection: close\r\n"
        b"\r\n"
        b'{"a":1}'
    )


def test_get_request_golden_with_query() -> None:
    assert build_request("GET", target("/slots", model="Smol LM/2 & co")) == (
        b"GET /slots?model=Smol%20LM%2F2%20%26%20co HTTP/1.1\r\n"
        b"Host: localhost\r\n"
        b"Accept-Encoding: identity\r\n"
        b"Connection: close\r\n"
        b"\r\n"
    )


def test_target_keeps_parameter_order() -> None:
    assert target("/p") == "/p"
    assert target("/slots", fail_on_no_slot="1", model="m") == "/slots?fail_on_no_slot=1&model=m"


@pytest.mark.parametrize(
    ("method", "path"),
    [("PUT", "/x"), ("GET", "x"), ("GET", "/a b"), ("GET", "/a\r\nX: y"), ("GET", "")],
)
def test_request_refuses_what_would_break_the_request_line(method: str, path: str) -> None:
    with pytest.raises(ValueError, match=r"^(method|target) must be"):
        build_request(method, path)


# ---- the head ----------------------------------------------------------------------------------

ROUTER_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: llama.cpp\r\n"
    b"Access-Control-Allow-Origin: \r\n"
    b"Connection: close\r\n"
    b"X-Accel-Buffering: no\r\n"
    b"Content-Type: application/json; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Connection: close\r\n"
    b"\r\n"
)


@pytest.mark.parametrize("mode", MODES)
def test_router_head_with_duplicated_connection_header(mode: str) -> None:
    head, rest = parse(ROUTER_HEAD + b"10\r\n", mode)
    assert head.status == 200
    assert head.reason == "OK"
    assert head.get_all("connection") == ["close", "close"]
    assert head.get("ACCESS-control-allow-origin") == ""  # an empty value is a value
    assert head.get("transfer-encoding") == "chunked"
    assert head.get("X-Missing") is None
    assert content_type(head) == "application/json"
    # Only what had arrived with the blank line is in `rest`; later bytes come in later feeds.
    assert b"10\r\n".startswith(rest)
    assert rest == b"10\r\n" or mode != "whole"


@pytest.mark.parametrize("mode", MODES)
def test_every_recorded_head_parses(mode: str) -> None:
    for path in sorted(RECORDINGS.glob("*.http")):
        raw = path.read_bytes()
        head, _ = parse(raw, mode)
        assert head.status == int(raw.split(b" ", 2)[1]), path.name
        assert head.get("server") == "llama.cpp", path.name


def test_rest_holds_the_bytes_after_the_head() -> None:
    head, rest = parse(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nhello")
    assert (head.status, head.reason, rest) == (400, "Bad Request", b"hello")


@pytest.mark.parametrize(
    ("line", "status", "reason"),
    [
        (b"HTTP/1.0 503 Service Unavailable", 503, "Service Unavailable"),
        (b"HTTP/1.1 200 ", 200, ""),
        (b"HTTP/1.1 200", 200, ""),
        (b"HTTP/1.1 404 Not  Found here", 404, "Not  Found here"),
    ],
)
def test_status_line_forms(line: bytes, status: int, reason: str) -> None:
    head, _ = parse(line + b"\r\n\r\n")
    assert (head.status, head.reason) == (status, reason)


def test_bare_lf_line_ends_are_accepted() -> None:
    head, rest = parse(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok")
    assert head.get("content-length") == "2"
    assert rest == b"ok"


@pytest.mark.parametrize("mode", MODES)
def test_interim_1xx_heads_are_skipped(mode: str) -> None:
    head, rest = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nA: b\r\n\r\nX", mode)
    assert (head.status, head.get("a")) == (201, "b")
    assert rest in (b"X", b"")  # bytewise: the body byte comes in the next feed


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"ICY 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nA: b\r\n continued\r\n\r\n", "folded header line"),
        (b"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", "holds a CR or NUL"),
    ],
)
def test_malformed_heads_are_bad_responses(data: bytes, message: str) -> None:
    with pytest.raises(BadResponse, match=message):
        parse(data)


def padded_head(size: int) -> bytes:
    """A head of exactly `size` bytes, blank line included."""
    start = b"HTTP/1.1 200 OK\r\nX-Pad: "
    end = b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


@pytest.mark.parametrize("mode", ["whole", "thirds"])
def test_head_cap_is_16_kib_blank_line_included(mode: str) -> None:
    head, _ = parse(padded_head(16_384) + b"body", mode)
    assert len(head.get("x-pad")) == 16_384 - 28
    with pytest.raises(BadResponse, match="response head longer than 16384 bytes"):
        parse(padded_head(16_385), mode)


def test_head_cap_fires_before_the_end_of_a_head_that_never_ends() -> None:
    parser = HeadParser(1024)
    parser.receive_data(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 1000)
    assert parser.next_head() is NEED_DATA
    parser.receive_data(b"a" * 100)  # past the cap, still no blank line
    with pytest.raises(BadResponse, match="longer than 1024 bytes"):
        parser.next_head()


def test_eof_before_any_byte_is_a_connect_failure() -> None:
    parser = HeadParser(16_384)
    parser.receive_data(b"")
    with pytest.raises(ConnectFailed, match="closed the connection without answering"):
        parser.next_head()


def test_eof_inside_the_head_is_a_protocol_error_that_says_how_far() -> None:
    # A byte came, so the server answered: a cut head is its fault, not a connection's.
    parser = HeadParser(16_384)
    parser.receive_data(b"HTTP/1.1 200 OK\r\nServ")
    assert parser.next_head() is NEED_DATA
    parser.receive_data(b"")
    with pytest.raises(BadResponse, match="closed the connection after 21 bytes, inside the"):
        parser.next_head()


# ---- bodies ------------------------------------------------------------------------------------


def head_with(*headers: tuple[str, str], status: int = 200) -> ResponseHead:
    return ResponseHead(status, "", headers)


def decode(decoder: BodyDecoder, data: bytes, mode: str, eof: bool = True) -> bytes:
    out = b"".join(decoder.feed(p) for p in split_by(mode, data))
    if eof:
        decoder.end()
    return out


def recorded_body(name: str) -> tuple[ResponseHead, bytes]:
    head, rest = parse((RECORDINGS / name).read_bytes())
    return head, rest


@pytest.mark.parametrize("mode", MODES)
def test_chunked_recording_decodes_to_its_json(mode: str) -> None:
    head, rest = recorded_body("router_slots.http")
    decoder = body_decoder(head, 4_194_304)
    assert isinstance(decoder, ChunkedBody)
    body = decode(decoder, rest, mode)
    assert body.startswith(b'[{"id":0,')
    assert body.endswith(b"}]")
    assert decoder.done


@pytest.mark.parametrize("mode", MODES)
def test_content_length_recording(mode: str) -> None:
    head, rest = recorded_body("too_long.http")
    decoder = body_decoder(head, 4_194_304)
    assert isinstance(decoder, LengthBody)
    body = decode(decoder, rest, mode)
    assert len(body) == int(head.get("content-length") or -1) == 195


def test_bytes_past_content_length_are_dropped() -> None:
    decoder = body_decoder(head_with(("Content-Length", "3")), None)
    assert decoder.feed(b"abcdef") == b"abc"
    assert decoder.done
    assert decoder.feed(b"more") == b""


def test_read_to_close_body() -> None:
    decoder = body_decoder(head_with(("Content-Type", "text/event-stream")), None)
    assert isinstance(decoder, CloseBody)
    assert decoder.feed(b"data: 1\n\n") == b"data: 1\n\n"
    assert not decoder.done
    decoder.end()
    assert decoder.done


@pytest.mark.parametrize("status", [204, 304])
def test_no_body_for_204_and_304(status: int) -> None:
    decoder = body_decoder(head_with(("Content-Length", "10"), status=status), None)
    assert isinstance(decoder, EmptyBody)
    assert decoder.done


def test_transfer_encoding_wins_over_content_length() -> None:
    decoder = body_decoder(
        head_with(("Content-Length", "99"), ("Transfer-Encoding", "Chunked")), None
    )
    assert isinstance(decoder, ChunkedBody)
    assert decode(decoder, b"2\r\nok\r\n0\r\n\r\n", "whole") == b"ok"


def test_identical_repeated_content_lengths_are_one() -> None:
    decoder = body_decoder(head_with(("Content-Length", "2"), ("Content-Length", "2, 2")), None)
    assert decode(decoder, b"ok", "whole") == b"ok"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ((("Transfer-Encoding", "gzip, chunked"),), "unsupported Transfer-Encoding: gzip, chunked"),
        ((("Transfer-Encoding", "gzip"),), "unsupported Transfer-Encoding: gzip"),
        ((("Content-Length", "2"), ("Content-Length", "3")), "bad Content-Length: 2, 3"),
        ((("Content-Length", "-1"),), "bad Content-Length: -1"),
        ((("Content-Length", "1e3"),), "bad Content-Length: 1e3"),
    ],
)
def test_bad_framing_headers(headers: tuple[tuple[str, str], ...], message: str) -> None:
    with pytest.raises(BadResponse, match=message):
        body_decoder(head_with(*headers), None)


def test_malformed_chunk_is_a_bad_response_with_the_decoders_message() -> None:
    decoder = body_decoder(head_with(("Transfer-Encoding", "chunked")), None)
    with pytest.raises(BadResponse, match=r"chunked body: invalid chunk size line: b'zz'"):
        decoder.feed(b"zz\r\ndata\r\n")


@pytest.mark.parametrize(
    ("headers", "data", "message"),
    [
        ((("Content-Length", "10"),), b"abc", "7 bytes before the end of the body"),
        ((("Transfer-Encoding", "chunked"),), b"5\r\nabc", "inside a chunked body, after 3"),
    ],
)
def test_eof_before_the_framed_end_is_truncation(
    headers: tuple[tuple[str, str], ...], data: bytes, message: str
) -> None:
    decoder = body_decoder(head_with(*headers), None)
    decoder.feed(data)
    with pytest.raises(TruncatedBody, match=message):
        decoder.end()
    assert isinstance(TruncatedBody("x"), BadResponse)


@pytest.mark.parametrize(
    "make",
    [
        lambda cap: body_decoder(head_with(("Transfer-Encoding", "chunked")), cap),
        lambda cap: body_decoder(head_with(), cap),
    ],
    ids=["chunked", "to-close"],
)
def test_body_cap(make: Callable[[int], BodyDecoder]) -> None:
    framed = {"chunked": b"a\r\n0123456789\r\n1\r\nX\r\n0\r\n\r\n"}
    decoder = make(10)
    data = framed["chunked"] if isinstance(decoder, ChunkedBody) else b"0123456789X"
    with pytest.raises(BadResponse, match="response body longer than 10 bytes"):
        decode(decoder, data, "whole")
    exact = make(11)
    assert len(decode(exact, data, "whole")) == 11


def test_content_length_over_the_cap_is_refused_before_reading() -> None:
    with pytest.raises(BadResponse, match="Content-Length 4194305 is over the 4194304-byte"):
        body_decoder(head_with(("Content-Length", "4194305")), 4_194_304)
    assert body_decoder(head_with(("Content-Length", "4194304")), 4_194_304).received == 0
