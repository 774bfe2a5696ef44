"""ChunkedDecoder, both twins: hand-written cases, each fed whole, byte by byte and in thirds."""

from collections.abc import Callable
from typing import Any

import pytest

from boxmaker._fast import IMPLEMENTATIONS, NO_EXTENSIONS, _chunked_c, _chunked_py, chunked
from boxmaker.proto.errors import ChunkedError
from tests.support.feed import FEED_MODES, feed_cuts

Decoder = _chunked_py.ChunkedDecoder | _chunked_c.ChunkedDecoder
DecoderClass = Callable[..., Decoder]


@pytest.fixture(params=[_chunked_py.ChunkedDecoder, _chunked_c.ChunkedDecoder], ids=["py", "c"])
def chunked_cls(request: pytest.FixtureRequest) -> DecoderClass:
    cls: DecoderClass = request.param
    return cls


@pytest.fixture(params=list(FEED_MODES), ids=list(FEED_MODES))
def chunked_feed(
    request: pytest.FixtureRequest,
) -> Callable[[Callable[[bytes], Any], bytes], list[Any]]:
    return FEED_MODES[request.param]


def decode(decoder: Decoder, chunked_feed: Callable[..., list[Any]], data: bytes) -> bytes:
    return b"".join(chunked_feed(decoder.feed, data))


# (id, encoded, body, unused): well-formed bodies; each ends the body (done is True).
GOOD = [
    ("empty-body", b"0\r\n\r\n", b"", b""),
    ("one-chunk", b"5\r\nhello\r\n0\r\n\r\n", b"hello", b""),
    (
        "many-chunks",
        b"1\r\na\r\n2\r\nbc\r\n3\r\ndef\r\n0\r\n\r\n",
        b"abcdef",
        b"",
    ),
    ("lower-hex", b"a\r\n0123456789\r\n0\r\n\r\n", b"0123456789", b""),
    ("upper-hex", b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789", b""),
    ("mixed-hex", b"1aB\r\n" + b"x" * 0x1AB + b"\r\n0\r\n\r\n", b"x" * 0x1AB, b""),
    ("leading-zeros", b"0005\r\nhello\r\n000\r\n\r\n", b"hello", b""),
    # 20 digits, but only 16 significant: still a valid size.
    ("leading-zeros-long", b"0000" + b"0" * 15 + b"3\r\nabc\r\n0\r\n\r\n", b"abc", b""),
    ("extension", b"5;name=value\r\nhello\r\n0;last\r\n\r\n", b"hello", b""),
    ("extension-quoted", b'5;a="b;c"\r\nhello\r\n0\r\n\r\n', b"hello", b""),
    ("extension-bws", b"5 \t;a=b ; c\r\nhello\r\n0 ;x\r\n\r\n", b"hello", b""),
    ("trailing-whitespace", b"5 \r\nhello\r\n0\t\r\n\r\n", b"hello", b""),
    ("one-trailer", b"2\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n", b"ok", b""),
    (
        "several-trailers",
        b"2\r\nok\r\n0\r\nX-A: 1\r\nX-B: two words\r\nX-C:\r\n\r\n",
        b"ok",
        b"",
    ),
    ("data-with-crlf", b"6\r\n\r\n\r\n\r\n\r\n0\r\n\r\n", b"\r\n\r\n\r\n", b""),
    ("data-looks-like-end", b"5\r\n0\r\n\r\n\r\n0\r\n\r\n", b"0\r\n\r\n", b""),
    ("unused-after-end", b"2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", b"ok", b"HTTP/1.1 200 OK\r\n"),
    ("unused-after-trailers", b"0\r\nX: y\r\n\r\n\r\n\r\n", b"", b"\r\n\r\n"),
    (
        "sse-events",
        b"".join(
            b"%x\r\n%s\r\n" % (len(event), event)
            for event in (b'data: {"n": %d}\n\n' % i for i in range(50))
        )
        + b"0\r\n\r\n",
        b"".join(b'data: {"n": %d}\n\n' % i for i in range(50)),
        b"",
    ),
]


@pytest.mark.parametrize(
    ("encoded", "body", "unused"), [c[1:] for c in GOOD], ids=[c[0] for c in GOOD]
)
def test_well_formed_body_decodes(
    chunked_cls: DecoderClass,
    chunked_feed: Callable[..., list[Any]],
    encoded: bytes,
    body: bytes,
    unused: bytes,
) -> None:
    decoder = chunked_cls()
    assert decode(decoder, chunked_feed, encoded) == body
    assert decoder.done
    assert decoder.unused == unused


# (id, encoded, message): malformed bodies; the message is the same however the input is cut.
BAD = [
    ("bad-hex", b"5g\r\nhello\r\n", "invalid chunk size line: b'5g'"),
    ("empty-size", b"\r\nhello\r\n", "invalid chunk size line: b''"),
    ("negative", b"-5\r\nhello\r\n", "invalid chunk size line: b'-5'"),
    ("plus", b"+5\r\nhello\r\n", "invalid chunk size line: b'+5'"),
    ("0x-prefix", b"0x5\r\nhello\r\n", "invalid chunk size line: b'0x5'"),
    ("underscore", b"1_0\r\n", "invalid chunk size line: b'1_0'"),
    ("leading-space", b" 5\r\nhello\r\n", "invalid chunk size line: b' 5'"),
    ("extension-only", b";a=b\r\n", "invalid chunk size line: b';a=b'"),
    ("space-inside-size", b"5 5\r\n", "invalid chunk size line: b'5 5'"),
    ("bare-cr-in-line", b"5\r;x\r\n", "invalid chunk size line: b'5\\r;x'"),
    ("bare-cr-in-extension", b"5;a\rb\r\n", "invalid chunk size line: b'5;a\\rb'"),
    ("bad-size-in-second-chunk", b"1\r\na\r\nq\r\n", "invalid chunk size line: b'q'"),
    (
        "long-bad-line-quoted-short",
        b"z" * 100 + b"\r\n",
        "invalid chunk size line: " + repr(b"z" * 40) + "...",
    ),
    ("bare-lf-size", b"5\nhello\r\n", "chunk size line ends in a bare LF, not CRLF: b'5'"),
    ("bare-lf-empty-size", b"\n", "chunk size line ends in a bare LF, not CRLF: b''"),
    ("bare-lf-trailer", b"0\r\nX: y\n\r\n", "trailer line ends in a bare LF, not CRLF: b'X: y'"),
    ("bare-lf-final", b"0\r\n\n", "trailer line ends in a bare LF, not CRLF: b''"),
    (
        "overflow-17-digits",
        b"1" + b"0" * 16 + b"\r\n",
        "chunk size too large (over 2**63-1): b'10000000000000000'",
    ),
    (
        "overflow-2-63",
        b"8000000000000000\r\n",
        "chunk size too large (over 2**63-1): b'8000000000000000'",
    ),
    (
        "overflow-all-f",
        b"F" * 16 + b";x\r\n",
        "chunk size too large (over 2**63-1): b'FFFFFFFFFFFFFFFF;x'",
    ),
    ("missing-crlf-after-data", b"3\r\nabc0\r\n\r\n", "missing CRLF after chunk data: got b'0'"),
    ("garbage-after-data", b"3\r\nabcde\r\n0\r\n\r\n", "missing CRLF after chunk data: got b'd'"),
    (
        "cr-without-lf-after-data",
        b"3\r\nabc\rX0\r\n\r\n",
        "missing CRLF after chunk data: got b'\\rX'",
    ),
    ("lf-only-after-data", b"3\r\nabc\n0\r\n\r\n", "missing CRLF after chunk data: got b'\\n'"),
    ("cr-cr-after-data", b"3\r\nabc\r\r\n", "missing CRLF after chunk data: got b'\\r\\r'"),
    (
        "size-line-over-cap",
        b"1;" + b"e" * 4096 + b"\r\nx\r\n",
        "chunk size line longer than 4096 bytes (CRLF included)",
    ),
    (
        "size-line-over-cap-no-lf",
        b"1" * 4096,
        "chunk size line longer than 4096 bytes (CRLF included)",
    ),
    (
        "trailer-line-over-cap",
        b"0\r\nX: " + b"v" * 4096 + b"\r\n\r\n",
        "trailer line longer than 4096 bytes (CRLF included)",
    ),
]


@pytest.mark.parametrize(("encoded", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_malformed_body_raises_naming_the_problem(
    chunked_cls: DecoderClass,
    chunked_feed: Callable[..., list[Any]],
    encoded: bytes,
    message: str,
) -> None:
    decoder = chunked_cls()
    with pytest.raises(ChunkedError) as info:
        decode(decoder, chunked_feed, encoded)
    assert str(info.value) == message
    assert not decoder.done
    # The decoder is spent: the next feed raises the same error, whatever it is given.
    with pytest.raises(ChunkedError) as again:
        decoder.feed(b"0\r\n\r\n")
    assert str(again.value) == message
    assert not decoder.done
    assert decoder.unused == b""


def test_truncated_input_is_not_done_and_not_an_error(chunked_cls: DecoderClass) -> None:
    encoded = b"3;x=y\r\nabc\r\n10\r\n" + bytes(range(16)) + b"\r\n0\r\nT: 1\r\n\r\n"
    body = b"abc" + bytes(range(16))
    for cut in range(len(encoded)):
        decoder = chunked_cls()
        out = decoder.feed(encoded[:cut])
        assert body.startswith(out), cut
        assert not decoder.done, cut
        assert decoder.unused == b"", cut
        # ... and the rest finishes it, as if it had come in one piece.
        assert out + decoder.feed(encoded[cut:]) == body, cut
        assert decoder.done, cut


def test_feeding_after_done_goes_to_unused(chunked_cls: DecoderClass) -> None:
    decoder = chunked_cls()
    assert decoder.feed(b"2\r\nok\r\n0\r\n\r\nab") == b"ok"
    assert decoder.done
    assert decoder.unused == b"ab"
    assert decoder.feed(b"5\r\nhello\r\n") == b""
    assert decoder.feed(b"") == b""
    assert decoder.feed(b"!") == b""
    assert decoder.done
    assert decoder.unused == b"ab5\r\nhello\r\n!"


def test_empty_feed_changes_nothing(chunked_cls: DecoderClass) -> None:
    decoder = chunked_cls()
    assert decoder.feed(b"") == b""
    assert decoder.feed(b"3\r\nab") == b"ab"
    assert decoder.feed(b"") == b""
    assert decoder.feed(b"c\r\n0\r\n\r\n") == b"c"
    assert decoder.done


def test_big_chunk_in_pieces_comes_back_piece_by_piece(chunked_cls: DecoderClass) -> None:
    body = bytes(range(256)) * 1024
    decoder = chunked_cls()
    assert decoder.feed(b"%X\r\n" % len(body)) == b""
    outs = feed_cuts(decoder.feed, body + b"\r\n0\r\n\r\n", range(0, len(body), 4096))
    assert outs[:-1] == [body[i : i + 4096] for i in range(0, len(body) - 4096, 4096)]
    assert b"".join(outs) == body
    assert decoder.done


def test_largest_chunk_size_is_accepted(chunked_cls: DecoderClass) -> None:
    decoder = chunked_cls()
    assert decoder.feed(b"7fffffffffffffff\r\nabc") == b"abc"
    assert not decoder.done


@pytest.mark.parametrize("cap", [3, 8, 64])
def test_line_cap_counts_the_crlf(chunked_cls: DecoderClass, cap: int) -> None:
    fits = b"1" + b" " * (cap - 3) + b"\r\n"  # exactly `cap` bytes with its CRLF
    assert len(fits) == cap
    for mode in FEED_MODES.values():
        decoder = chunked_cls(max_line_bytes=cap)
        assert b"".join(mode(decoder.feed, fits + b"x\r\n0\r\n\r\n")) == b"x"
        assert decoder.done
        assert decoder.max_line_bytes == cap
        decoder = chunked_cls(max_line_bytes=cap)
        with pytest.raises(ChunkedError, match=rf"^chunk size line longer than {cap} bytes"):
            mode(decoder.feed, b" " + fits)


def test_trailer_cap_counts_the_crlf(chunked_cls: DecoderClass) -> None:
    for mode in FEED_MODES.values():
        decoder = chunked_cls(max_line_bytes=8)
        assert b"".join(mode(decoder.feed, b"0\r\nX: 123\r\n\r\n")) == b""
        assert decoder.done
        decoder = chunked_cls(max_line_bytes=8)
        with pytest.raises(ChunkedError, match=r"^trailer line longer than 8 bytes"):
            mode(decoder.feed, b"0\r\nX: 1234\r\n\r\n")


def test_default_cap_is_exported(chunked_cls: DecoderClass) -> None:
    assert _chunked_py.DEFAULT_MAX_LINE_BYTES == _chunked_c.DEFAULT_MAX_LINE_BYTES == 4096
    assert chunked.DEFAULT_MAX_LINE_BYTES == 4096
    assert chunked_cls().max_line_bytes == 4096


@pytest.mark.parametrize("cap", [2, 0, -1])
def test_cap_too_small_to_read_the_last_chunk_is_refused(
    chunked_cls: DecoderClass, cap: int
) -> None:
    with pytest.raises(ValueError, match=rf"^max_line_bytes must be at least 3, got {cap}$"):
        chunked_cls(max_line_bytes=cap)


class BytesSubclass(bytes):
    pass


@pytest.mark.parametrize(
    "data",
    [bytearray(b"0\r\n\r\n"), memoryview(b"0\r\n\r\n"), BytesSubclass(b"0\r\n\r\n"), "0\r\n\r\n"],
    ids=["bytearray", "memoryview", "bytes-subclass", "str"],
)
def test_feed_takes_only_bytes(chunked_cls: DecoderClass, data: Any) -> None:
    decoder = chunked_cls()
    with pytest.raises(TypeError):
        decoder.feed(data)
    assert decoder.feed(b"0\r\n\r\n") == b""
    assert decoder.done


def test_compiled_twin_is_in_use() -> None:
    if NO_EXTENSIONS:
        assert chunked.ChunkedDecoder.__module__ == "boxmaker._fast._chunked_py"
        assert IMPLEMENTATIONS["chunked"] == "py"
    else:
        assert chunked.ChunkedDecoder.__module__ == "boxmaker._fast._chunked_c"
        assert IMPLEMENTATIONS["chunked"] == "c"
