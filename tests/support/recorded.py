"""What the scripted llama-server (tests/support/fakeserver.py) records: each request, as read.

`read_request` reads one HTTP/1.1 request off a connection (a chunked or Content-Length body,
unchunked) into a `Recorded`, whose body is also parsed as JSON when it is JSON. A request this
reader does not take raises `Malformed`; a client that leaves first raises `ClientGone`.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

MAX_REQUEST_HEAD_BYTES = 65_536  # far above any request loopd sends; a bound against a runaway


@dataclass(frozen=True, slots=True)
class Recorded:
    index: int  # arrival order over the whole server, from 0
    connection: int  # the index of the connection it came on
    method: str
    target: str  # as sent, query string included
    path: str
    query: dict[str, str] = field(hash=False)
    headers: tuple[tuple[str, str], ...]
    body: bytes  # decoded: a chunked request body is unchunked
    json: Any = field(hash=False)  # the body parsed as JSON, or None
    received_at: float  # time.monotonic() when the whole request had arrived

    def header(self, name: str) -> str | None:
        """The first header of that name, case-insensitively."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class Malformed(Exception):
    """Not an HTTP/1.1 request this server reads (it answers 400)."""


class ClientGone(Exception):
    """The client closed (or reset) before a whole request arrived."""


class RequestReader:
    """Reads a request off a blocking socket, up to a delimiter or a size."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buf = conn, bytearray()

    def _fill(self) -> None:
        try:
            data = self.conn.recv(65_536)
        except OSError as exc:
            raise ClientGone from exc
        if not data:
            raise ClientGone
        self.buf += data

    def until(self, delim: bytes, limit: int, what: str) -> bytes:
        while (at := self.buf.find(delim)) < 0:
            if len(self.buf) > limit:
                raise Malformed(f"{what} longer than {limit} bytes")
            self._fill()
        out = bytes(self.buf[:at])
        del self.buf[: at + len(delim)]
        return out

    def exactly(self, size: int) -> bytes:
        while len(self.buf) < size:
            self._fill()
        out = bytes(self.buf[:size])
        del self.buf[:size]
        return out


def _read_chunked(reader: RequestReader) -> bytes:
    body = bytearray()
    while True:
        size_line = reader.until(b"\r\n", 1024, "chunk size line")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            raise Malformed(f"bad chunk size line {size_line!r}") from None
        if size == 0:
            while reader.until(b"\r\n", MAX_REQUEST_HEAD_BYTES, "trailer"):
                pass  # trailers are read and dropped
            return bytes(body)
        body += reader.exactly(size)
        if reader.exactly(2) != b"\r\n":
            raise Malformed("a chunk not followed by CRLF")


def read_request(reader: RequestReader, connection: int) -> Recorded:
    """One request off the connection (its index is set when it is recorded)."""
    head = reader.until(b"\r\n\r\n", MAX_REQUEST_HEAD_BYTES, "request head").decode("latin-1")
    request_line, *lines = head.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Malformed(f"bad request line {request_line!r}")
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise Malformed(f"bad header line {line!r}")
        headers.append((name, value.strip()))
    fields = {k.lower(): v for k, v in headers}
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = _read_chunked(reader)
    elif (length := fields.get("content-length")) is not None:
        if not length.isdigit():
            raise Malformed(f"bad Content-Length {length!r}")
        body = reader.exactly(int(length))
    else:
        body = b""
    parsed = None
    with contextlib.suppress(orjson.JSONDecodeError):
        parsed = orjson.loads(body) if body else None
    method, target, now, url = parts[0], parts[1], time.monotonic(), urlsplit(parts[1])
    query, pairs = dict(parse_qsl(url.query)), tuple(headers)
    return Recorded(-1, connection, method, target, url.path, query, pairs, body, parsed, now)
