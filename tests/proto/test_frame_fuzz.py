"""Fuzzing FrameDecoder: any bytes, in any split, then EOF.

The invariant (STYLE.md R3's fuzz harness, run by Hypothesis): each `next_frame` returns a Frame,
NEED_DATA or CLOSED, or raises FrameError; never anything else. After every drain the decoder
holds less than one prefix plus `max_frame_bytes` (an over-long prefix is refused before its body
is buffered), a FrameError is final and frees the buffer, and the split changes nothing: the
frames and the error are the same fed whole or at the cuts. test_frame.py has the random-frames
and random-junk cases at a fixed count; this one feeds streams that mix real frames, prefixes and
noise, under small configured caps, at FUZZ_EXAMPLES examples (`make fuzz`).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from boxmaker.proto.errors import FrameError
from boxmaker.proto.frame import CHANNEL_KINDS, CLOSED, NEED_DATA, Frame, FrameDecoder, encode_frame
from tests.support.feed import pieces_at
from tests.support.proto.fuzz import cuts_of, fuzz_settings

PREFIX = 4
KINDS = sorted(CHANNEL_KINDS)

json_bodies = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
good_frames = st.builds(
    lambda kind, final, body: encode_frame(kind, {"v": body}, final),
    st.sampled_from(KINDS),
    st.booleans(),
    json_bodies,
)
# A prefix over any payload: right, off by a little, zero, huge.
framed_junk = st.builds(
    lambda n, payload: struct.pack(">I", n) + payload,
    st.integers(0, 80) | st.sampled_from([1_048_576, 1_048_577, 2**32 - 1]),
    st.binary(max_size=40)
    | st.sampled_from([b"{}", b"[]", b'{"kind":"turn"}', b'{"kind":"turn","final":true}']),
)
streams = st.lists(good_frames | framed_junk | st.binary(max_size=12), max_size=6).map(b"".join)


def run(pieces: list[bytes], max_bytes: int, max_depth: int) -> tuple[list[Frame], str | None]:
    """Feeds each piece and drains; then EOF. Returns the frames and the FrameError's message."""
    decoder = FrameDecoder(max_frame_bytes=max_bytes, max_depth=max_depth)
    frames: list[Frame] = []
    try:
        for piece in [*pieces, b""]:
            decoder.receive_data(piece)
            while True:
                got = decoder.next_frame()
                if got is NEED_DATA:
                    break
                if got is CLOSED:
                    assert piece == b""  # CLOSED only after EOF, and only at a boundary
                    assert decoder.buffered == 0
                    return frames, None
                assert isinstance(got, Frame)
                frames.append(got)
            assert decoder.buffered < PREFIX + max_bytes
    except FrameError as e:
        error = str(e)
    else:
        raise AssertionError("EOF was fed: the decoder must end with CLOSED or FrameError")
    assert decoder.buffered == 0  # a broken stream holds nothing
    with pytest.raises(FrameError) as again:  # and the error is final
        decoder.next_frame()
    assert str(again.value) == error
    return frames, error


@fuzz_settings()
@given(
    stream=streams,
    max_bytes=st.sampled_from([1, 2, 8, 30, 64, 1_048_576]),
    max_depth=st.sampled_from([2, 3, 128]),
    data=st.data(),
)
def test_any_bytes_any_split_then_eof(
    stream: bytes, max_bytes: int, max_depth: int, data: st.DataObject
) -> None:
    pieces = pieces_at(stream, cuts_of(data, stream))
    note(f"pieces={pieces!r}")
    whole = run([stream], max_bytes, max_depth)
    assert run(pieces, max_bytes, max_depth) == whole
    bytewise = [stream[i : i + 1] for i in range(len(stream))]
    assert run(bytewise, max_bytes, max_depth) == whole
