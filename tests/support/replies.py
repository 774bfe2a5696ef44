"""The replies a scripted llama-server sends (tests/support/fakeserver.py), built from parts.

A `Reply` is a status line and headers, body pieces with a delay before each, then an `End`.
The builders give the shapes llama-server sends: an SSE stream in chunks (`sse_reply`), a JSON
body (`json_reply`, with Content-Length or chunked as a router forwards it), recorded bytes
replayed as they came (`raw_reply`), and the pieces (`chunk`, `sse_event`, `split`).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Any

import orjson


class End(enum.Enum):
    CLOSE = "close"
    CUT = "cut"
    SILENCE = "silence"


@dataclass(frozen=True, slots=True)
class Piece:
    delay_s: float  # waited before these bytes are sent
    data: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    status: int = 200
    reason: str = "OK"
    headers: Sequence[tuple[str, str]] = ()
    pieces: Sequence[Piece] = ()
    end: End = End.CLOSE
    head_delay_s: float = 0.0  # before the first byte: the "sent, no byte yet" wait
    raw: bool = False  # the pieces already hold the status line and headers (a recording)

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", tuple(self.headers))
        object.__setattr__(self, "pieces", tuple(self.pieces))

    def head(self) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {self.reason}"] + [f"{k}: {v}" for k, v in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def wire(self) -> list[Piece]:
        """Every piece as sent: the head first (unless raw), head_delay_s before the first."""
        pieces = list(self.pieces) if self.raw else [Piece(0.0, self.head()), *self.pieces]
        if pieces and self.head_delay_s:
            pieces[0] = replace(pieces[0], delay_s=pieces[0].delay_s + self.head_delay_s)
        return pieces

    def payload(self) -> bytes:
        """All the bytes a client that reads to the end receives."""
        return b"".join(p.data for p in self.wire())


Event = bytes | dict[str, Any] | list[Any]  # one SSE event: JSON, or a whole event as bytes

LAST_CHUNK = b"0\r\n\r\n"
SERVER_HEADERS = (("Server", "llama.cpp"), ("Access-Control-Allow-Origin", ""))  # as recorded


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse_event(event: Event) -> bytes:
    """A JSON value as one `data:` event; bytes are a whole event already, sent verbatim."""
    return event if isinstance(event, bytes) else b"data: " + orjson.dumps(event) + b"\n\n"


def split(
    data: bytes, cuts: Iterable[int] = (), *, every: int | None = None, delay_s: float = 0.0
) -> tuple[Piece, ...]:
    """`data` cut at the given offsets and every `every` bytes; delay_s before each later piece."""
    points = set(cuts) | set(range(0, len(data), every) if every else ())
    edges = sorted({0, len(data)} | {p for p in points if 0 < p < len(data)})
    parts = [data[a:b] for a, b in itertools.pairwise(edges)] or [b""]
    return tuple(Piece(delay_s if i else 0.0, part) for i, part in enumerate(parts))


def _phrase(status: int) -> str:
    return HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Unknown"


def sse_reply(
    events: Sequence[Event],
    *,
    chunked: bool = True,
    delay_s: float = 0.0,
    done: bool = True,
    status: int = 200,
    end: End = End.CLOSE,
    head_delay_s: float = 0.0,
) -> Reply:
    """A stream as llama-server sends it: each event in its own chunk, then `data: [DONE]` and the
    last chunk (both left out with done=False); delay_s before each event but the first.
    Unchunked, the body is read to close."""
    bodies = [sse_event(e) for e in events] + ([b"data: [DONE]\n\n"] if done else [])
    pieces = [
        Piece(delay_s if i else 0.0, chunk(b) if chunked else b) for i, b in enumerate(bodies)
    ]
    pieces += [Piece(0.0, LAST_CHUNK)] if chunked and done else []
    headers = [*SERVER_HEADERS, ("X-Accel-Buffering", "no"), ("Content-Type", "text/event-stream")]
    headers += [("Transfer-Encoding", "chunked")] if chunked else []
    headers.append(("Connection", "close"))
    return Reply(status, _phrase(status), headers, pieces, end, head_delay_s)


def json_reply(status: int, obj: Any, *, chunked: bool = False, end: End = End.CLOSE) -> Reply:
    """A JSON body with Content-Length, or chunked without one (as a router forwards it)."""
    body = orjson.dumps(obj)
    headers = [*SERVER_HEADERS, ("Content-Type", "application/json; charset=utf-8")]
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
        pieces = [Piece(0.0, chunk(body)), Piece(0.0, LAST_CHUNK)]
    else:
        headers.append(("Content-Length", str(len(body))))
        pieces = [Piece(0.0, body)]
    headers.append(("Connection", "close"))
    return Reply(status, _phrase(status), headers, pieces, end)


def raw_reply(
    data: bytes,
    cuts: Iterable[int] = (),
    *,
    every: int | None = None,
    delay_s: float = 0.0,
    end: End = End.CLOSE,
) -> Reply:
    """Replays recorded response bytes exactly (status line and all), optionally in pieces."""
    return Reply(pieces=split(data, cuts, every=every, delay_s=delay_s), end=end, raw=True)


def error_reply(status: int, message: str) -> Reply:
    """The JSON error llama-server sends, with `message`; the fake server's own 400 and 500."""
    return json_reply(status, {"error": {"code": status, "message": message, "type": "fake"}})
