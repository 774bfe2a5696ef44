"""Fuzzing the `_fast` parsers, compiled and Python twins alike: SSELineSplitter, ChunkedDecoder.

The invariant, for any bytes fed in any split (STYLE.md R3's fuzz harness, run by Hypothesis):
- each feed returns, or raises the module's own error (SSEError, ChunkedError); anything else
  (an IndexError, a SystemError from the C twin, a crash) fails the test;
- what is held between feeds stays within the configured caps (SSE: `pending_bytes` and
  `event_bytes`; chunked: the cut line, visible in the py twin; the C twin's line buffer is one
  malloc of `max_line_bytes`, bounded by construction), and no output is bigger than its cap;
- an error is final: every later feed raises it again, word for word;
- the split does not matter: fed whole or at the cuts, the output and the error are the same.

test_diff_sse.py and test_diff_chunked.py hold the twins to each other; this holds each twin to
the invariant, at FUZZ_EXAMPLES examples (`make fuzz`) or a bounded default in `make test`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from boxmaker._fast import _chunked_c, _chunked_py, _sse_c, _sse_py
from boxmaker.proto.errors import ChunkedError, SSEError
from tests.support.feed import pieces_at
from tests.support.proto.fuzz import cuts_of, fuzz_settings, token_stream

SSE_TWINS = {"py": _sse_py.SSELineSplitter, "c": _sse_c.SSELineSplitter}
CHUNKED_TWINS = {"py": _chunked_py.ChunkedDecoder, "c": _chunked_c.ChunkedDecoder}

SSE_TOKENS = [
    b"data:", b"data: ", b"data", b"event: x", b"id: 1", b"retry: 5", b":", b": keep-alive",
    b"\n", b"\r", b"\r\n", b"\n\n", b"[DONE]", b'{"x":1}', b"\xef\xbb\xbf", b"\xef", b" ", b"x",
]  # fmt: skip
CHUNKED_TOKENS = [
    b"0", b"1", b"5", b"a", b"F", b"ff", b"10", b"00000000000000001", b"ffffffffffffffff",
    b"\r\n", b"\r", b"\n", b";", b";ext=1", b" ", b"\t", b"hello", b"X-Trailer: 1", b"\r\n\r\n",
]  # fmt: skip


def sse_run(cls: Any, line_cap: int, event_cap: int, pieces: list[bytes]) -> tuple[Any, ...]:
    """Feeds the pieces, checking the caps after each feed; returns (payloads, error message)."""
    splitter = cls(line_cap, max_event_bytes=event_cap)
    got: list[bytes] = []
    error = None
    for piece in pieces:
        try:
            out = splitter.feed(piece)
        except SSEError as e:
            error = str(e)
            break
        assert splitter.pending_bytes <= line_cap
        assert splitter.event_bytes <= event_cap
        assert all(len(p) <= event_cap for p in out)
        got.extend(out)
    if error is not None:
        for again in (b"x\n", b"data: y\n\n"):  # final: the same error, whatever comes next
            with pytest.raises(SSEError) as later:
                splitter.feed(again)
            assert str(later.value) == error
    return (got, error)


@pytest.mark.parametrize("twin", SSE_TWINS)
@fuzz_settings()
@given(
    stream=token_stream(SSE_TOKENS) | st.binary(max_size=200),
    line_cap=st.sampled_from([1, 2, 5, 16, 64, 1_048_576]),
    event_cap=st.sampled_from([1, 3, 8, 40, 4_194_304]),
    data=st.data(),
)
def test_sse_any_bytes_any_split(
    twin: str, stream: bytes, line_cap: int, event_cap: int, data: st.DataObject
) -> None:
    cls = SSE_TWINS[twin]
    pieces = pieces_at(stream, cuts_of(data, stream))
    note(f"pieces={pieces!r}")
    whole = sse_run(cls, line_cap, event_cap, [stream])
    assert_same_outcome(whole, sse_run(cls, line_cap, event_cap, pieces))


def assert_same_outcome(whole: tuple[Any, ...], cut: tuple[Any, ...]) -> None:
    """SSE outcomes (payloads, error) fed whole and cut: equal; but when it ends in an error, the
    payloads before it depend on the feeds (a feed that raises returns nothing), so then one list
    of payloads need only be the start of the other."""
    if whole[1] is None:
        assert cut == whole
        return
    assert cut[1] == whole[1]
    shorter, longer = sorted((whole[0], cut[0]), key=len)
    assert longer[: len(shorter)] == shorter


@pytest.mark.parametrize("twin", SSE_TWINS)
def test_payloads_before_an_error_depend_on_the_feeds(twin: str) -> None:
    # Found by atheris (fuzz/run_atheris.py): the event before the bad line comes out only when
    # it is fed apart from it. The error is the same either way.
    stream = b"\n\ndata\n\n9\x00\x00\x00\n\x00\x00\x00\x00\x00\x00\x00\x18\x00"
    cls = SSE_TWINS[twin]
    whole = sse_run(cls, 5, 8, [stream])
    cut = sse_run(cls, 5, 8, [stream[:10], stream[10:]])
    assert whole == ([], "SSE line longer than 5 bytes")
    assert cut == ([b""], "SSE line longer than 5 bytes")
    assert_same_outcome(whole, cut)


def chunked_run(cls: Any, cap: int, pieces: list[bytes]) -> tuple[Any, ...]:
    """Feeds the pieces, checking what is held after each feed; returns the outcome."""
    decoder = cls(cap)
    body = bytearray()
    fed = 0
    error = None
    for piece in pieces:
        fed += len(piece)
        try:
            out = decoder.feed(piece)
        except ChunkedError as e:
            error = str(e)
            break
        body += out
        assert len(body) + len(decoder.unused) <= fed  # decoding never makes bytes up
        if isinstance(decoder, _chunked_py.ChunkedDecoder):
            assert len(decoder._line) <= cap  # the cut line, the only thing held
    if error is not None:
        for again in (b"1\r\nx\r\n", b"0\r\n\r\n"):  # final: the same error, whatever comes
            with pytest.raises(ChunkedError) as later:
                decoder.feed(again)
            assert str(later.value) == error
        return ("error", bytes(body), error)
    if decoder.done:  # what came after the end is the caller's, kept whole in `unused`
        unused = decoder.unused
        assert decoder.feed(b"more") == b""
        assert decoder.unused == unused + b"more"
        return ("done", bytes(body), unused)
    return ("open", bytes(body), b"")


@pytest.mark.parametrize("twin", CHUNKED_TWINS)
@fuzz_settings()
@given(
    stream=token_stream(CHUNKED_TOKENS) | st.binary(max_size=200),
    cap=st.sampled_from([3, 4, 5, 8, 16, 4096]),
    data=st.data(),
)
def test_chunked_any_bytes_any_split(
    twin: str, stream: bytes, cap: int, data: st.DataObject
) -> None:
    cls = CHUNKED_TWINS[twin]
    pieces = pieces_at(stream, cuts_of(data, stream))
    note(f"pieces={pieces!r}")
    assert_same_chunked(chunked_run(cls, cap, [stream]), chunked_run(cls, cap, pieces))


def assert_same_chunked(whole: tuple[Any, ...], cut: tuple[Any, ...]) -> None:
    """Chunked outcomes fed whole and cut: equal, but for the body before an error (as SSE)."""
    if whole[0] != "error":
        assert cut == whole
        return
    assert cut[0] == "error"
    assert cut[2] == whole[2]
    assert whole[1].startswith(cut[1]) or cut[1].startswith(whole[1])


@pytest.mark.parametrize("twin", CHUNKED_TWINS)
def test_a_line_that_never_ends_is_stopped_at_the_cap(twin: str) -> None:
    # The bound the fuzzing checks, at a scale it does not reach: 1 MiB of hex with no line end.
    decoder: Any = CHUNKED_TWINS[twin](4096)

    def feed_a_mebibyte() -> None:
        for _ in range(256):
            decoder.feed(b"0" * 4096)

    with pytest.raises(ChunkedError, match="4096"):
        feed_a_mebibyte()
