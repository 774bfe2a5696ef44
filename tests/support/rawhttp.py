"""A tiny raw-bytes HTTP/1.1 helper over a TCP socket, for the recorder and the harness checks.

It keeps every byte the server sends (status line, headers, chunked framing), so a recording is
exactly what came off the wire. One request per connection with `Connection: close`, as the client
in the M2a brief does; the response ends when the server closes. The small parsers here are strict
test tools, independent of boxmaker's own decoders, so a harness check cannot pass because of a bug
it shares with the code under test.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

# Generous bounds: the tiny model answers in well under a second; a stalled server must still fail.
DEFAULT_TIMEOUT = 60.0
RECV_SIZE = 65536


def json_body(obj: Any) -> bytes:
    """Compact UTF-8 JSON, the way a request body is sent (and saved beside a recording)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def build_request(
    method: str,
    path: str,
    *,
    host: str,
    port: int,
    body: bytes | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> bytes:
    """The bytes of one HTTP/1.1 request with `Connection: close` (and a JSON body if given)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (body or b"")


def stream(
    host: str, port: int, request: bytes, timeout: float = DEFAULT_TIMEOUT
) -> Generator[bytes, None, None]:
    """Sends `request` and yields each piece received until the server closes the connection.

    Raises TimeoutError when the whole exchange takes longer than `timeout` seconds. Closing the
    generator early closes the socket, which is how a client cancels a generation.
    """
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no end of response from {host}:{port} within {timeout:.0f} s")
            sock.settimeout(left)
            try:
                piece = sock.recv(RECV_SIZE)
            except TimeoutError:
                raise TimeoutError(
                    f"no end of response from {host}:{port} within {timeout:.0f} s"
                ) from None
            if not piece:
                return
            yield piece


def exchange(host: str, port: int, request: bytes, timeout: float = DEFAULT_TIMEOUT) -> bytes:
    """Sends `request` and returns every byte received until the server closes."""
    return b"".join(stream(host, port, request, timeout))


def call(
    host: str,
    port: int,
    method: str,
    path: str,
    obj: Any = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Response:
    """One request (with `obj` as its JSON body, if not None), parsed."""
    body = None if obj is None else json_body(obj)
    raw = exchange(
        host, port, build_request(method, path, host=host, port=port, body=body), timeout
    )
    return parse_response(raw)


@dataclass(frozen=True)
class Response:
    raw: bytes
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes  # as framed on the wire (chunk sizes included when chunked)

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        values = self.header_values(name)
        return values[0] if values else None

    def header_values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def chunked(self) -> bool:
        return any(v.lower() == "chunked" for v in self.header_values("Transfer-Encoding"))

    def content(self) -> bytes:
        """The body with its transfer framing removed."""
        if self.chunked:
            return dechunk(self.body)
        length = self.header("Content-Length")
        if length is not None and len(self.body) != int(length):
            raise ValueError(f"body is {len(self.body)} bytes, Content-Length says {length}")
        return self.body

    def json(self) -> Any:
        return json.loads(self.content())

    def sse(self) -> list[str]:
        return sse_data(self.content())


def parse_response(raw: bytes) -> Response:
    """Splits a complete raw response into status, headers and the framed body."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError(f"no end of headers in {len(raw)} bytes: {raw[:200]!r}")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"bad status line {status_line!r}")
    headers = []
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"bad header line {line!r}")
        headers.append((name.strip(), value.strip()))
    return Response(raw, int(parts[1]), parts[2] if len(parts) > 2 else "", headers, body)


def dechunk(body: bytes) -> bytes:
    """Decodes a complete chunked body; raises ValueError if it is malformed or cut short."""
    out = bytearray()
    pos = 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            raise ValueError(f"chunk size line not terminated at offset {pos}")
        size_text = body[pos:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError(f"bad chunk size {size_text!r} at offset {pos}") from None
        pos = end + 2
        if size == 0:
            # Trailers (none expected from llama-server), then the final CRLF.
            if not body.endswith(b"\r\n", pos):
                raise ValueError("chunked body ends without its final CRLF")
            return bytes(out)
        if pos + size + 2 > len(body):
            raise ValueError(f"chunk of {size} bytes at offset {pos} is cut short")
        out += body[pos : pos + size]
        if body[pos + size : pos + size + 2] != b"\r\n":
            raise ValueError(f"chunk at offset {pos} is not followed by CRLF")
        pos += size + 2


def sse_data(content: bytes) -> list[str]:
    """The `data:` payloads of an SSE stream, one per event (comment lines skipped)."""
    events: list[str] = []
    data: list[str] = []
    for line in content.decode().replace("\r\n", "\n").split("\n"):
        if line == "":
            if data:
                events.append("\n".join(data))
                data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        events.append("\n".join(data))
    return events


def sse_json(content: bytes) -> list[Any]:
    """The JSON objects of an SSE stream, stopping at `[DONE]`."""
    out = []
    for payload in sse_data(content):
        if payload == "[DONE]":
            break
        out.append(json.loads(payload))
    return out
