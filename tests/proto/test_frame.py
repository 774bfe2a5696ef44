"""proto.frame: the frame codec, fed whole, byte by byte and at random cuts; every bad frame."""

import struct
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.proto.errors import EncodeError, FrameError, ProtocolError
from boxmaker.proto.frame import (
    CHANNEL_KINDS,
    CLOSED,
    MAX_ERROR_MESSAGE_CHARS,
    MAX_FRAME_BYTES,
    NEED_DATA,
    Frame,
    FrameDecoder,
    encode_frame,
    error_frame,
)
from boxmaker.proto.wire import ErrorCode, WireError
from tests.support.feed import FEED_MODES, pieces_at


def framed(payload: bytes) -> bytes:
    """A raw frame around any payload, bypassing encode_frame's checks."""
    return struct.pack(">I", len(payload)) + payload


def drain(dec: FrameDecoder, out: list[Frame] | None = None) -> list[Frame]:
    """Every frame the decoder has ready, appended to `out` as each comes (kept if one raises)."""
    out = [] if out is None else out
    while isinstance(got := dec.next_frame(), Frame):
        out.append(got)
    return out


def feed_all(dec: FrameDecoder, pieces: list[bytes], out: list[Frame]) -> None:
    """Feeds the pieces then EOF, draining into `out` after each."""
    for piece in pieces:
        dec.receive_data(piece)
        drain(dec, out)
    dec.receive_data(b"")
    drain(dec, out)


def decode_all(pieces: list[bytes], kinds: frozenset[str] = CHANNEL_KINDS) -> list[Frame]:
    """Feeds the pieces one at a time, draining after each, then EOF; expects a clean close."""
    dec = FrameDecoder(kinds)
    out: list[Frame] = []
    for piece in pieces:
        dec.receive_data(piece)
        out += drain(dec)
    dec.receive_data(b"")
    out += drain(dec)
    assert dec.next_frame() is CLOSED
    assert dec.buffered == 0
    return out


FRAMES = [
    Frame("turn", True, {"session": "s1", "content": "hi", "resume": False}),
    Frame("turn_event", False, {"event": {"type": "content", "text": 'héllo 😀\n"q"'}}),
    Frame("turn_event", False, {}),
    Frame("turn_done", True, {"content": None, "usage": {"cache_n": 1}}),
    Frame("error", True, {"code": "bad_request", "message": "no"}),
]
STREAM = b"".join(encode_frame(f.kind, f.body, f.final) for f in FRAMES)


def test_encode_frame_exact_bytes() -> None:
    got = encode_frame("turn_event", {"event": {"type": "queued", "ahead": 2}}, False)
    payload = b'{"kind":"turn_event","final":false,"body":{"event":{"type":"queued","ahead":2}}}'
    assert got == len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize("mode", list(FEED_MODES))
def test_every_feed_mode_gives_the_same_frames(mode: str) -> None:
    dec = FrameDecoder()

    def feed(data: bytes) -> list[Frame]:
        dec.receive_data(data)
        return drain(dec)

    outputs = FEED_MODES[mode](feed, STREAM)
    assert [f for out in outputs for f in out] == FRAMES
    dec.receive_data(b"")
    assert dec.next_frame() is CLOSED


def test_need_data_until_the_last_byte_arrives() -> None:
    data = encode_frame(FRAMES[0].kind, FRAMES[0].body, FRAMES[0].final)
    dec = FrameDecoder()
    for i in range(len(data) - 1):
        dec.receive_data(data[i : i + 1])
        assert dec.next_frame() is NEED_DATA, f"after {i + 1} bytes"
    dec.receive_data(data[-1:])
    assert dec.next_frame() == FRAMES[0]
    assert dec.next_frame() is NEED_DATA


def test_eof_at_a_frame_boundary_is_closed_and_stays_closed() -> None:
    dec = FrameDecoder()
    dec.receive_data(b"")
    assert dec.next_frame() is CLOSED
    assert dec.next_frame() is CLOSED
    assert repr(CLOSED) == "CLOSED"
    assert repr(NEED_DATA) == "NEED_DATA"


def test_data_after_eof_is_the_callers_bug() -> None:
    dec = FrameDecoder()
    dec.receive_data(b"")
    dec.receive_data(b"")  # EOF twice is still EOF
    with pytest.raises(RuntimeError, match="after EOF"):
        dec.receive_data(b"x")
    assert dec.next_frame() is CLOSED


def test_decoder_accepts_extra_kinds_for_the_worker_pipes() -> None:
    kinds = CHANNEL_KINDS | {"infer_ask", "infer_grant"}
    data = encode_frame("infer_ask", {"slot": 0}, False, kinds)
    assert decode_all([data], kinds) == [Frame("infer_ask", False, {"slot": 0})]
    with pytest.raises(FrameError, match='frame kind "infer_ask" is unknown'):
        decode_all([data])


# --- bad frames: (bytes, the message's words) ----------------------------------------------------

GOOD: dict[str, Any] = {"kind": "turn", "final": True, "body": {}}

BAD_FRAMES: dict[str, tuple[bytes, str]] = {
    "zero length": (b"\x00\x00\x00\x00", "frame length is 0"),
    "too long": (struct.pack(">I", MAX_FRAME_BYTES + 1), "frame length 1048577 is over the limit"),
    "max length prefix": (b"\xff\xff\xff\xff", "frame length 4294967295 is over the limit"),
    "not UTF-8": (framed(b'{"kind":"\xc3\x28"}'), "frame is not UTF-8 (invalid continuation byte"),
    "not JSON": (framed(b'{"kind": turn}'), "frame is not JSON"),
    "trailing garbage": (framed(orjson.dumps(GOOD) + b"x"), "frame is not JSON"),
    "empty object text": (framed(b" "), "frame is not JSON"),
    "array": (framed(b"[]"), "frame is not a JSON object (got array)"),
    "string": (framed(b'"turn"'), "frame is not a JSON object (got string)"),
    "null": (framed(b"null"), "frame is not a JSON object (got null)"),
    "missing kind": (framed(b'{"final":true,"body":{}}'), 'frame is missing key "kind"'),
    "missing final": (framed(b'{"kind":"turn","body":{}}'), 'frame is missing key "final"'),
    "missing body": (framed(b'{"kind":"turn","final":true}'), 'frame is missing key "body"'),
    "extra key": (framed(orjson.dumps({**GOOD, "id": 1})), 'frame has unexpected key "id"'),
    "kind not a string": (
        framed(orjson.dumps({**GOOD, "kind": 7})),
        "frame kind must be a string, got integer",
    ),
    "final not a bool": (
        framed(orjson.dumps({**GOOD, "final": 1})),
        "frame final must be a boolean, got integer",
    ),
    "final null": (
        framed(orjson.dumps({**GOOD, "final": None})),
        "frame final must be a boolean, got null",
    ),
    "body an array": (
        framed(orjson.dumps({**GOOD, "body": []})),
        "frame body must be an object, got array",
    ),
    "body a string": (
        framed(orjson.dumps({**GOOD, "body": "{}"})),
        "frame body must be an object, got string",
    ),
    "unknown kind": (
        framed(orjson.dumps({**GOOD, "kind": "shell"})),
        'frame kind "shell" is unknown (known: error, turn, turn_done, turn_event)',
    ),
    "EOF in the prefix": (
        b"\x00\x00",
        "connection closed in the middle of a frame (after 2 of 4 length bytes)",
    ),
    "EOF in the body": (
        framed(orjson.dumps(GOOD))[:-3],
        "connection closed in the middle of a frame (after",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
@pytest.mark.parametrize("mode", ["whole", "bytewise"])
def test_bad_frames_raise_frame_error_saying_what_was_wrong(case: str, mode: str) -> None:
    data, words = BAD_FRAMES[case]
    # A good frame first: what came before a bad frame is still delivered.
    good = encode_frame("turn_event", {"n": 1}, False)
    pieces = [good + data] if mode == "whole" else [bytes([b]) for b in good + data]
    dec = FrameDecoder()
    got: list[Frame] = []
    with pytest.raises(FrameError) as info:
        feed_all(dec, pieces, got)
    assert words in str(info.value)
    assert got == [Frame("turn_event", False, {"n": 1})]
    assert isinstance(info.value, ProtocolError)
    # The decoder stays broken: the connection is to be closed.
    with pytest.raises(FrameError) as again:
        dec.next_frame()
    assert again.value is info.value


def test_eof_in_the_body_says_how_far_it_got() -> None:
    data = framed(b'{"kind":"turn","final":true,"body":{}}')
    dec = FrameDecoder()
    dec.receive_data(data[:10])
    dec.receive_data(b"")
    with pytest.raises(FrameError, match=r"after 6 of 38 body bytes"):
        dec.next_frame()


def test_the_largest_frame_is_accepted() -> None:
    overhead = len(orjson.dumps({"kind": "turn_event", "final": False, "body": {"t": ""}}))
    body = {"t": "x" * (MAX_FRAME_BYTES - overhead)}
    data = encode_frame("turn_event", body, False)
    assert len(data) == 4 + MAX_FRAME_BYTES
    assert decode_all([data]) == [Frame("turn_event", False, body)]
    assert decode_all(pieces_at(data, [1, 3, 4, 5, 65_536, MAX_FRAME_BYTES])) == [
        Frame("turn_event", False, body)
    ]


def test_one_byte_more_is_refused_from_the_prefix_before_the_body_arrives() -> None:
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">I", MAX_FRAME_BYTES + 1))
    with pytest.raises(FrameError, match="frame length 1048577 is over the limit of 1048576"):
        dec.next_frame()
    assert dec.buffered == 0  # nothing of the body was asked for, and after the error nothing held


def test_a_smaller_configured_limit_applies() -> None:
    dec = FrameDecoder(max_frame_bytes=64)
    dec.receive_data(encode_frame("turn", {"content": "x" * 64}, True)[:4])
    with pytest.raises(FrameError, match="over the limit of 64 bytes"):
        dec.next_frame()
    with pytest.raises(ValueError, match="max_frame_bytes must be 1 to 1048576"):
        FrameDecoder(max_frame_bytes=MAX_FRAME_BYTES + 1)


# --- encoding errors -----------------------------------------------------------------------------


def test_encode_refuses_an_oversized_frame() -> None:
    with pytest.raises(EncodeError, match=r"over the limit of 1048576; split what it carries"):
        encode_frame("turn_event", {"t": "x" * MAX_FRAME_BYTES}, False)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("shell", {}, True), 'frame kind "shell" is unknown (known: error, turn, turn_done'),
        (("turn", [], True), "frame body must be a dict, got list"),
        (("turn", {}, 1), "frame final must be a bool, got int"),
        (("turn", {"a": "\ud800"}, True), 'frame body of kind "turn" is not JSON'),
        (("turn", {1: "a"}, True), 'frame body of kind "turn" is not JSON'),
        (("turn", {"a": 2**64}, True), 'frame body of kind "turn" is not JSON'),
        (("turn", {"a": object()}, True), 'frame body of kind "turn" is not JSON'),
    ],
)
def test_encode_refuses_what_would_not_decode(args: tuple[Any, ...], words: str) -> None:
    with pytest.raises(EncodeError) as info:
        encode_frame(*args)
    assert words in str(info.value)
    assert not isinstance(info.value, ProtocolError)


# --- error frames --------------------------------------------------------------------------------


def test_error_frame_carries_a_wire_error_and_is_final() -> None:
    [frame] = decode_all([error_frame(ErrorCode.BAD_REQUEST, "frame length is 0")])
    assert frame == Frame("error", True, {"code": "bad_request", "message": "frame length is 0"})
    assert WireError.from_json(frame.body) == WireError(ErrorCode.BAD_REQUEST, "frame length is 0")


def test_error_frame_for_a_frame_error_message() -> None:
    dec = FrameDecoder()
    dec.receive_data(framed(b"[]"))
    with pytest.raises(FrameError) as info:
        dec.next_frame()
    [frame] = decode_all([error_frame(ErrorCode.BAD_REQUEST, str(info.value))])
    assert frame.body["message"] == "frame is not a JSON object (got array)"


def test_error_frame_never_fails_on_a_long_or_unencodable_message() -> None:
    [frame] = decode_all([error_frame(ErrorCode.INTERNAL, "x\ud800" + "y" * 2 * MAX_FRAME_BYTES)])
    message = frame.body["message"]
    assert len(message) == MAX_ERROR_MESSAGE_CHARS
    assert message.startswith("x?yyy")
    assert message.endswith("...")


# --- random frames at random cuts ----------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"), max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
frames = st.builds(
    Frame,
    st.sampled_from(sorted(CHANNEL_KINDS)),
    st.booleans(),
    st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), json_values, max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, max_size=6), st.data())
def test_random_frames_at_random_cuts_decode_the_same(
    sent: list[Frame], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(f.kind, f.body, f.final) for f in sent)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12), label="cuts")
    assert decode_all(pieces_at(stream, cuts)) == sent
    assert decode_all([stream]) == sent


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.data())
def test_random_bytes_give_frames_or_frame_error_never_anything_else(
    junk: bytes, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(junk)), max_size=6), label="cuts")
    for stream in (junk, struct.pack(">I", len(junk)) + junk):
        assert outcome([stream]) == outcome(pieces_at(stream, cuts))


def outcome(pieces: list[bytes]) -> tuple[list[Frame], str | None]:
    """The frames decoded, and the FrameError's message if one ended the stream (any other
    exception propagates and fails the test)."""
    got: list[Frame] = []
    try:
        feed_all(FrameDecoder(), pieces, got)
    except FrameError as e:
        return got, str(e)
    return got, None
