"""The channel frame codec (DECISIONS.md, "The channel frame format"), sans-IO in h11's shape.

A frame is a 4-byte big-endian unsigned length N, then N bytes of UTF-8 JSON, an object
`{"kind": "<kind>", "final": <bool>, "body": {...}}`, with 1 <= N <= MAX_FRAME_BYTES. The same
framing runs on `loop.sock` and on the pipes between `loopd` and its session workers; each passes
its own set of kinds.

Decoding follows h11's verbs: `receive_data(data)` (b"" is EOF), then `next_frame()` until it
returns NEED_DATA (more bytes needed) or CLOSED (EOF at a frame boundary). A malformed frame raises
FrameError, whose message says what was wrong and is meant for an `error` frame with code
`bad_request` (`error_frame`); the decoder then stays broken, as the connection is to be closed,
and holds nothing: what it had buffered is dropped, and so is every byte fed after.

A frame is judged by what it means, not how it is spelled (DECISIONS.md; issue 18): any JSON
whitespace, key order, string escapes and number spelling are read, since a frame is parsed once
and never hashed (log lines are, so they keep one canonical spelling: proto/log.py). What is
refused is what has no single meaning or no safe one: invalid UTF-8, lone surrogates, NaN and
Infinity (orjson's reader refuses them all), a key twice in one object (JSON leaves its meaning
open and orjson silently keeps the last, so it is looked for here), and nesting past
MAX_FRAME_DEPTH levels, the frame object itself counting as one, so that no receiver walks an
unbounded depth. Only the frame's shape is checked here; what a body holds is the receiver's
business.

The duplicate-key search costs a second parse, so it is skipped when the bytes are exactly what
`encode_frame` writes for what they decode to (every frame Boxmaker itself sends): such bytes
cannot hold a key twice, since orjson writes each key of the decoded object once.
"""

import array
import enum
import itertools
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ._codec import json_type, load_json_object, quote
from .errors import EncodeError, FrameError
from .wire import ErrorCode, WireError

# DECISIONS.md's limit. A turn's content and a tool result (16 KiB capped) fit with a wide margin;
# the limit exists so that a peer cannot make us buffer without bound.
MAX_FRAME_BYTES = 1_048_576
LENGTH_BYTES = 4
# Levels of objects and arrays, the frame object counting as 1 (its body as 2). orjson cannot
# write more than 254; a turn or an event needs under 10; the margin is for tool schemas.
MAX_FRAME_DEPTH = 128

# The channel's kinds (M2b section 6). The worker pipes add their own.
CHANNEL_KINDS: frozenset[str] = frozenset({"turn", "turn_event", "turn_done", "error"})

# An error frame's message is cut to this many characters, so that error_frame never fails.
MAX_ERROR_MESSAGE_CHARS = 4096

_KEYS = ("kind", "final", "body")


class Sentinel(enum.Enum):
    """What an incremental decoder returns instead of a value (h11's sentinels)."""

    NEED_DATA = "NEED_DATA"
    CLOSED = "CLOSED"

    def __repr__(self) -> str:
        return self.value

    __str__ = __repr__


NeedData = Literal[Sentinel.NEED_DATA]
Closed = Literal[Sentinel.CLOSED]

NEED_DATA: NeedData = Sentinel.NEED_DATA
"""A decoder (next_frame(), loopd's next_head()) needs more bytes before it can return a value."""
CLOSED: Closed = Sentinel.CLOSED
"""next_frame() saw EOF at a frame boundary: the peer closed cleanly, and no frame will follow."""


@dataclass(frozen=True, slots=True)
class Frame:
    kind: str
    final: bool
    body: dict[str, Any]


def encode_frame(
    kind: str,
    body: dict[str, Any],
    final: bool,
    kinds: Collection[str] = CHANNEL_KINDS,
) -> bytes:
    """The bytes of one frame: the length prefix, then the JSON object.

    Raises:
        EncodeError: `kind` is not one of `kinds`, `body` is not a dict of JSON values, `final` is
            not a bool, the JSON is nested deeper than MAX_FRAME_DEPTH or longer than
            MAX_FRAME_BYTES.
    """
    if kind not in kinds:
        raise EncodeError(f"frame kind {quote(kind)} is unknown (known: {_listed(kinds)})")
    if not isinstance(final, bool):
        raise EncodeError(f"frame final must be a bool, got {type(final).__name__}")
    if not isinstance(body, dict):
        raise EncodeError(f"frame body must be a dict, got {type(body).__name__}")
    try:
        payload = orjson.dumps({"kind": kind, "final": final, "body": body})
    except orjson.JSONEncodeError as e:
        raise EncodeError(f"frame body of kind {quote(kind)} is not JSON: {e}") from None
    if (depth := _depth(payload, MAX_FRAME_DEPTH)) > MAX_FRAME_DEPTH:
        raise EncodeError(f"frame of kind {quote(kind)} is nested {_deeper(depth)}")
    if len(payload) > MAX_FRAME_BYTES:
        raise EncodeError(
            f"frame of kind {quote(kind)} is {len(payload)} bytes, over the limit of "
            f"{MAX_FRAME_BYTES}; split what it carries"
        )
    return len(payload).to_bytes(LENGTH_BYTES, "big") + payload


def error_frame(code: ErrorCode, message: str) -> bytes:
    """An `error` frame (final) carrying WireError(code, message). Never fails for a str message:
    a long one is cut, and characters UTF-8 cannot carry are replaced."""
    if len(message) > MAX_ERROR_MESSAGE_CHARS:
        message = message[: MAX_ERROR_MESSAGE_CHARS - 3] + "..."
    message = message.encode("utf-8", "replace").decode("utf-8")
    return encode_frame("error", WireError(code, message).to_json(), True)


def _listed(kinds: Collection[str]) -> str:
    return ", ".join(sorted(kinds))


# A JSON string, escapes included (the unrolled form: fast on long strings).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1, -1 as signed bytes
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _depth(payload: bytes, limit: int) -> int:
    """How deep the objects and arrays of `payload` (JSON that orjson read or wrote) nest, or 0
    when they cannot pass `limit`. Works on the bytes, in C loops: strings are cut out, the
    brackets left are summed as +1 and -1, and the highest running sum is the depth."""
    if payload.count(b"[") + payload.count(b"{") <= limit:
        return 0  # the common case: too few brackets to pass the limit at all
    brackets = _JSON_STRING.sub(b"", payload).translate(_BRACKET_STEPS, _NOT_BRACKETS)
    return max(itertools.accumulate(array.array("b", brackets)))


def _deeper(depth: int, limit: int = MAX_FRAME_DEPTH) -> str:
    return f"deeper than {limit} levels of objects and arrays (reached {depth})"


def _duplicate_key(text: str) -> str | None:
    """The first key that an object of `text` (JSON orjson accepted) holds twice, or None. The
    keys are compared decoded, so "\u00e9" and "é" are the same key."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items if not found else ():
            if key in seen:
                found.append(key)
                break
            seen.add(key)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    return found[0] if found else None


class FrameDecoder:
    """Frames out of a byte stream fed in pieces of any size.

    Args:
        kinds: the kinds this end accepts; any other is an error.
        max_frame_bytes: the largest N accepted; checked from the prefix, before the body is
            buffered. At most MAX_FRAME_BYTES.
        max_depth: the most levels of nesting accepted, the frame object counting as 1. At most
            MAX_FRAME_DEPTH.
    """

    def __init__(
        self,
        kinds: Collection[str] = CHANNEL_KINDS,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_depth: int = MAX_FRAME_DEPTH,
    ) -> None:
        if not 1 <= max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(
                f"max_frame_bytes must be 1 to {MAX_FRAME_BYTES}, got {max_frame_bytes}"
            )
        if not 2 <= max_depth <= MAX_FRAME_DEPTH:
            raise ValueError(f"max_depth must be 2 to {MAX_FRAME_DEPTH}, got {max_depth}")
        self._kinds = frozenset(kinds)
        self._max = max_frame_bytes
        self._max_depth = max_depth
        self._buf = bytearray()
        self._eof = False
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a frame."""
        return len(self._buf)

    def receive_data(self, data: bytes) -> None:
        """Adds bytes from the peer; b"" means the peer closed (EOF). After a FrameError the
        bytes are dropped: the connection is being closed, and nothing is held for it.

        Raises:
            RuntimeError: bytes after EOF (the caller's bug, not the peer's).
        """
        if not data:
            self._eof = True  # again is harmless, as in h11
        elif self._eof:
            raise RuntimeError("receive_data after EOF: the stream has ended")
        elif self._error is None:
            self._buf += data

    def next_frame(self) -> Frame | NeedData | Closed:
        """The next complete frame, NEED_DATA, or CLOSED.

        Raises:
            FrameError: the stream broke the frame format; every later call raises it again.
        """
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except FrameError as e:
            self._error = e
            self._buf = bytearray()  # frees it: a broken stream holds nothing
            raise

    def _next(self) -> Frame | NeedData | Closed:
        buf = self._buf
        if len(buf) < LENGTH_BYTES:
            return self._short(f"{len(buf)} of {LENGTH_BYTES} length bytes")
        n = int.from_bytes(buf[:LENGTH_BYTES], "big")
        # The prefix alone decides: an over-long frame is refused before its body is buffered.
        if n == 0:
            raise FrameError("frame length is 0; a frame carries 1 to 1048576 bytes of JSON")
        if n > self._max:
            raise FrameError(f"frame length {n} is over the limit of {self._max} bytes")
        end = LENGTH_BYTES + n
        if len(buf) < end:
            return self._short(f"{len(buf) - LENGTH_BYTES} of {n} body bytes")
        payload = bytes(buf[LENGTH_BYTES:end])
        del buf[:end]
        return self._parse(payload)

    def _short(self, have: str) -> NeedData | Closed:
        if not self._eof:
            return NEED_DATA
        if not self._buf:
            return CLOSED
        raise FrameError(f"connection closed in the middle of a frame (after {have})")

    def _parse(self, payload: bytes) -> Frame:
        obj = load_json_object(payload, "frame", FrameError)
        if (depth := _depth(payload, self._max_depth)) > self._max_depth:
            raise FrameError(f"frame is nested {_deeper(depth, self._max_depth)}")
        for key in _KEYS:
            if key not in obj:
                raise FrameError(
                    f"frame is missing key {quote(key)} (a frame is kind, final, body)"
                )
        if len(obj) != len(_KEYS):
            extra = next(k for k in obj if k not in _KEYS)
            raise FrameError(
                f"frame has unexpected key {quote(extra)} (a frame is kind, final, body)"
            )
        kind, final, body = obj["kind"], obj["final"], obj["body"]
        if not isinstance(kind, str):
            raise FrameError(f"frame kind must be a string, got {json_type(kind)}")
        if not isinstance(final, bool):
            raise FrameError(f"frame final must be a boolean, got {json_type(final)}")
        if not isinstance(body, dict):
            raise FrameError(f"frame body must be an object, got {json_type(body)}")
        if kind not in self._kinds:
            raise FrameError(f"frame kind {quote(kind)} is unknown (known: {_listed(self._kinds)})")
        try:
            canonical = orjson.dumps(obj) == payload
        except orjson.JSONEncodeError:  # pragma: no cover - the depth check comes first
            canonical = False
        if not canonical and (twice := _duplicate_key(payload.decode())) is not None:
            raise FrameError(
                f"frame has the key {quote(twice)} twice in one object; a key may appear once"
            )
        return Frame(kind, final, body)
