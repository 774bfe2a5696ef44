"""proto.frame, issue 9: a broken decoder holds nothing; frames it cannot represent are refused."""

import struct

import orjson
import pytest

from boxmaker.proto.errors import EncodeError, FrameError
from boxmaker.proto.frame import (
    MAX_FRAME_DEPTH,
    NEED_DATA,
    Frame,
    FrameDecoder,
    encode_frame,
)

GOOD = encode_frame("turn", {"session": "s", "content": "hi"}, True)


def framed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def nested(levels: int) -> bytes:
    """A frame payload whose body holds lists nested so that the whole is `levels` deep."""
    inner = b"[" * (levels - 2) + b"]" * (levels - 2)
    return b'{"kind":"turn","final":true,"body":{"x":' + inner + b"}}"


def decode_one(data: bytes, max_depth: int = MAX_FRAME_DEPTH) -> Frame:
    dec = FrameDecoder(max_depth=max_depth)
    dec.receive_data(data)
    got = dec.next_frame()
    assert isinstance(got, Frame)
    return got


# ---- after an error, nothing is held -----------------------------------------------------------


def test_after_an_error_the_buffer_is_dropped_and_later_bytes_are_not_kept() -> None:
    dec = FrameDecoder()
    dec.receive_data(framed(b"[1]") + GOOD * 100)  # a bad frame, then good ones already here
    with pytest.raises(FrameError, match="not a JSON object") as first:
        dec.next_frame()
    assert dec.buffered == 0
    for _ in range(64):
        dec.receive_data(b"\0" * 65_536)  # 4 MiB after the error
    assert dec.buffered == 0
    with pytest.raises(FrameError) as again:
        dec.next_frame()
    assert again.value is first.value


def test_an_over_long_prefix_drops_the_bytes_after_it() -> None:
    dec = FrameDecoder(max_frame_bytes=16)
    dec.receive_data(struct.pack(">I", 17) + b"x" * 1000)
    with pytest.raises(FrameError, match="over the limit of 16"):
        dec.next_frame()
    assert dec.buffered == 0


def test_eof_after_an_error_is_still_the_error() -> None:
    dec = FrameDecoder()
    dec.receive_data(framed(b"{"))
    with pytest.raises(FrameError, match="not JSON"):
        dec.next_frame()
    dec.receive_data(b"")
    with pytest.raises(FrameError, match="not JSON"):
        dec.next_frame()


# ---- nesting -----------------------------------------------------------------------------------


def test_nesting_up_to_the_limit_is_accepted() -> None:
    frame = decode_one(framed(nested(MAX_FRAME_DEPTH)))
    assert frame.kind == "turn"


@pytest.mark.parametrize("levels", [MAX_FRAME_DEPTH + 1, 255, 300, 1000])
def test_nesting_past_the_limit_is_refused(levels: int) -> None:
    with pytest.raises(FrameError, match=rf"nested deeper than {MAX_FRAME_DEPTH} levels"):
        decode_one(framed(nested(levels)))


def test_nesting_past_what_orjson_reads_is_not_json() -> None:
    with pytest.raises(FrameError, match="frame is not JSON"):
        decode_one(framed(nested(5000)))


def test_a_smaller_depth_limit_applies() -> None:
    decode_one(framed(nested(4)), max_depth=4)
    with pytest.raises(
        FrameError, match=r"nested deeper than 4 levels of objects and arrays \(reached 5\)"
    ):
        decode_one(framed(nested(5)), max_depth=4)
    with pytest.raises(ValueError, match="max_depth must be 2 to"):
        FrameDecoder(max_depth=MAX_FRAME_DEPTH + 1)


def test_objects_count_as_levels_too() -> None:
    body: dict[str, object] = {}
    inner = body
    for _ in range(MAX_FRAME_DEPTH - 1):  # the frame object is level 1, body level 2
        inner["a"] = inner = {}
    with pytest.raises(FrameError, match="nested deeper"):
        decode_one(framed(orjson.dumps({"kind": "turn", "final": True, "body": body})))


def test_encode_refuses_what_the_decoder_would_refuse() -> None:
    deep: list[object] = []  # frame 1, body 2, then MAX_FRAME_DEPTH - 2 lists
    for _ in range(MAX_FRAME_DEPTH - 3):
        deep = [deep]
    assert decode_one(encode_frame("turn", {"x": deep}, True)).body == {"x": deep}
    with pytest.raises(EncodeError, match=f"nested deeper than {MAX_FRAME_DEPTH} levels"):
        encode_frame("turn", {"x": [deep]}, True)


# ---- any spelling, one meaning (issue 18; tests/proto/test_frame_spellings.py has the rest) ------


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        (b'{"kind":"turn","final":true,"body":{},"body":{"a":1}}', "body"),
        (b'{"kind":"turn","kind":"error","final":true,"body":{}}', "kind"),
        (b'{"kind":"turn","final":true,"body":{"content":"a","content":"b"}}', "content"),
        (b'{"kind":"turn","final":true,"body":{"x":[{"y":1,"y":1}]}}', "y"),
    ],
)
def test_a_duplicate_key_is_refused_and_named(payload: bytes, key: str) -> None:
    with pytest.raises(FrameError, match=f'the key "{key}" twice'):
        decode_one(framed(payload))


@pytest.mark.parametrize(
    ("payload", "body"),
    [
        (b'{"kind": "turn", "final": true, "body": {}}', {}),
        (b'{"kind":"turn","final":true,"body":{"c":"\\u0041"}}', {"c": "A"}),
        (b'{"kind":"turn","final":true,"body":{"n":1e2}}', {"n": 100.0}),
        (b'{"kind":"turn","final":true,"body":{}}\n', {}),
    ],
    ids=["spaces", "escape", "exponent", "newline"],
)
def test_other_spellings_are_read(payload: bytes, body: dict[str, object]) -> None:
    assert decode_one(framed(payload)) == Frame("turn", True, body)


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        (b'{"kind": "turn", "final": true, "body": {}, "body": {"a": 1}}', "body"),
        (b'{\n  "kind": "turn",\n  "final": true,\n  "body": {"a": 1, "a": 1}\n}', "a"),
        (b'{"kind":"turn","final":true,"body":{"\\u00e9":1,"\xc3\xa9":2}}', "\u00e9"),
    ],
    ids=["spaced", "pretty", "escaped-twin"],
)
def test_a_duplicate_key_in_another_spelling_is_refused(payload: bytes, key: str) -> None:
    # orjson alone keeps the last value: the search runs on every frame not spelled canonically.
    with pytest.raises(FrameError, match="twice in one object"):
        decode_one(framed(payload))


def test_key_order_is_the_senders() -> None:
    # The re-encode keeps the order of the keys as decoded, so any order of the three is read.
    payload = b'{"body":{"b":1,"a":2},"final":false,"kind":"turn_event"}'
    assert decode_one(framed(payload)) == Frame("turn_event", False, {"b": 1, "a": 2})


def test_a_frame_split_anywhere_still_decodes_after_the_checks() -> None:
    dec = FrameDecoder()
    for i in range(len(GOOD)):
        dec.receive_data(GOOD[i : i + 1])
        if i < len(GOOD) - 1:
            assert dec.next_frame() is NEED_DATA
    assert dec.next_frame() == Frame("turn", True, {"session": "s", "content": "hi"})
