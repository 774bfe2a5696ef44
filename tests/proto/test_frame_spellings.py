"""Frames are strict about meaning, not spelling (issue 18, docs/protocol.md "Frames").

The same `turn` frame written by writers Boxmaker does not own: Python's json with its defaults
(", " and ": ", non-ASCII as \\u escapes), pretty-printed, keys sorted or reversed, and jq (compact
and pretty): each decodes to the same Frame, in the decoder and through a real `loopd serve` on
loop.sock. What has no single meaning is still refused, in any spelling: a key twice, invalid
UTF-8, a lone surrogate, NaN and Infinity, nesting past the limit, a length over the limit.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from boxmaker.proto import TurnDone, WireError
from boxmaker.proto.errors import FrameError
from boxmaker.proto.frame import MAX_FRAME_DEPTH, Frame, FrameDecoder, encode_frame
from tests.support.serve import connect, read_frames, serve_env

BODY = {"session": "spell", "content": 'café "quoted" \\ ✓ 😀\n', "resume": False}
FRAME = {"kind": "turn", "final": True, "body": BODY}


def jq(*args: str) -> Callable[[dict[str, Any]], bytes]:
    def write(obj: dict[str, Any]) -> bytes:
        # Not skipped when jq is missing: `make test` installs it, and a test that passes without
        # running would hide the case.
        if shutil.which("jq") is None:
            pytest.fail("jq is not installed: `make test` installs it (apt-get install jq)")
        out = subprocess.run(
            ["jq", *args, "."], input=json.dumps(obj).encode(), capture_output=True, check=True
        )
        return out.stdout

    return write


SPELLINGS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "orjson": orjson.dumps,
    "json-defaults": lambda o: json.dumps(o).encode(),
    "json-raw-utf8": lambda o: json.dumps(o, ensure_ascii=False).encode(),
    "json-pretty": lambda o: json.dumps(o, indent=2).encode(),
    "json-sorted-keys": lambda o: json.dumps(o, sort_keys=True).encode(),
    "reversed-keys": lambda o: json.dumps(dict(reversed(list(o.items())))).encode(),
    "tabs-and-crlf": lambda o: json.dumps(o, indent="\t").replace("\n", "\r\n").encode(),
    "jq-compact": jq("-c"),
    "jq-pretty": jq(),
    "jq-ascii": jq("-c", "-a"),
}


def framed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def decode(payload: bytes) -> Frame:
    dec = FrameDecoder()
    dec.receive_data(framed(payload))
    got = dec.next_frame()
    assert isinstance(got, Frame), got
    return got


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_decodes_to_the_same_frame(spelling: str) -> None:
    payload = SPELLINGS[spelling](FRAME)
    if spelling != "orjson":
        assert payload != orjson.dumps(FRAME)  # really another spelling
    assert decode(payload) == Frame("turn", True, BODY)


def test_escapes_for_every_character_decode_to_it() -> None:
    escaped = b'{"kind":"turn","final":true,"body":{"c":"caf\\u00e9 \\ud83d\\ude00 \\/ \\t"}}'
    assert decode(escaped).body == {"c": "café 😀 / \t"}


REFUSED = {
    "duplicate-pretty": (
        json.dumps(FRAME, indent=2).replace('"final": true', '"final": true, "final": false'),
        "twice in one object",
    ),
    "duplicate-escaped": ('{"kind": "turn", "final": true, "body": {}, "bod\\u0079": {}}', "twice"),
    "lone-surrogate": ('{"kind": "turn", "final": true, "body": {"c": "\\ud800"}}', "not JSON"),
    "nan": ('{"kind": "turn", "final": true, "body": {"n": NaN}}', "not JSON"),
    "infinity": ('{"kind": "turn", "final": true, "body": {"n": -Infinity}}', "not JSON"),
    "too-deep": (
        '{"kind": "turn", "final": true, "body": {"x": '
        + "[ " * (MAX_FRAME_DEPTH - 1) + "]" * (MAX_FRAME_DEPTH - 1) + "}}",
        f"deeper than {MAX_FRAME_DEPTH} levels",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED)
def test_what_has_no_single_meaning_is_refused_in_any_spelling(case: str) -> None:
    text, why = REFUSED[case]
    with pytest.raises(FrameError, match=why):
        decode(text.encode())


def test_invalid_utf8_and_a_byte_order_mark_are_refused() -> None:
    with pytest.raises(FrameError, match="not UTF-8"):
        decode(b'{"kind": "turn", "final": true, "body": {"c": "\xff"}}')
    with pytest.raises(FrameError, match="not JSON"):
        decode(b'\xef\xbb\xbf{"kind": "turn", "final": true, "body": {}}')


def test_an_over_long_frame_is_refused_from_its_prefix() -> None:
    dec = FrameDecoder(max_frame_bytes=64)
    dec.receive_data(framed(json.dumps(FRAME, indent=4).encode()))
    with pytest.raises(FrameError, match="over the limit of 64 bytes"):
        dec.next_frame()


def test_boxmakers_own_frames_stay_canonical() -> None:
    payload = encode_frame("turn", BODY, True)[4:]
    assert payload == orjson.dumps(FRAME)


# ---- through loop.sock ---------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["json-defaults", "json-pretty", "jq-pretty", "reversed-keys"])
def test_loopd_serves_a_turn_in_another_spelling(spelling: str) -> None:
    with serve_env() as env:
        env.start()
        session = f"spell-{spelling}"
        body = {**BODY, "session": session}
        frame = {"kind": "turn", "final": True, "body": body}
        with connect(env.socket) as sock:
            sock.sendall(framed(SPELLINGS[spelling](frame)))
            frames = read_frames(sock)
        assert isinstance(frames[-1], TurnDone), frames
        user = [r for r in env.log_lines(session) if r["type"] == "user"]
        assert [r["content"] for r in user] == [BODY["content"]]


def test_loopd_refuses_a_duplicate_key_in_another_spelling() -> None:
    with serve_env() as env:
        env.start()
        text = json.dumps(FRAME, indent=2).replace('"final": true', '"final": true, "final": true')
        with connect(env.socket) as sock:
            sock.sendall(framed(text.encode()))
            frames = read_frames(sock)
        assert len(frames) == 1, frames
        assert isinstance(frames[0], WireError), frames
        assert frames[0].code == "bad_request"
        assert 'the key "final" twice' in frames[0].message
