"""A hostile llama-server for tests: raw TCP, and each chat connection runs the next script.

`HostileServer()` listens on 127.0.0.1 (inferproxy's upstream). For each connection it reads one
request, then:

- `POST /v1/chat/completions`: runs the next script queued with `push(name, script)`. A script is
  a function of a `Peer`, which sends raw bytes (no framing is added: the script writes status
  line, headers, chunk sizes and all), drips them, repeats them, waits, holds the connection open
  or resets it. When the script returns, the connection is closed.
- `GET /slots`: one idle slot 0, so a client waiting for a first byte polls as against a server
  that has simply gone quiet.
- anything else: 404.

Sends stop as soon as the client has gone (through inferproxy: its close reaches us as an EPIPE
or a reset), so a flood of gigabytes costs what the client read before it hung up; `Served`
records how many bytes that was. Every wait is bounded by `stop`; `close()` ends every
connection and raises `HostileServerError` for a failure in a server thread or a chat request
that found no script, so a test cannot pass over one. The helpers at the end (`send`,
`then_hold`, `head_then`, `reset_after`, `stream_head`, `chunk`, `event`) build scripts and replies.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

CHAT = b"POST /v1/chat/completions "
SLOTS = b'[{"id":0,"n_ctx":2048,"is_processing":false}]'
SEND_TIMEOUT_S = 10.0  # a client that stops reading without closing does not pin a thread
MAX_REQUEST_BYTES = 1_048_576
JOIN_S = 5.0


class HostileServerError(AssertionError):
    """A server thread failed, or a chat request came with no script queued."""


class ClientGone(Exception):
    """The client closed or reset the connection: the script ends here."""


class Peer:
    """One chat connection, as a script drives it. Every method raises ClientGone once the
    client has gone, and returns at once when the server is stopping."""

    def __init__(self, sock: socket.socket, stop: threading.Event) -> None:
        self.sock = sock
        self.stop = stop
        self.sent = 0
        self.reset_at_end = False

    def send(self, data: bytes) -> None:
        if self.stop.is_set():
            raise ClientGone("the server is stopping")
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ClientGone(str(exc)) from None
        self.sent += len(data)

    def pause(self, seconds: float) -> None:
        if seconds > 0 and self.stop.wait(seconds):
            raise ClientGone("the server is stopping")

    def drip(self, data: bytes, every_s: float, step: int = 1) -> None:
        """`data`, `step` bytes at a time, `every_s` apart."""
        for i in range(0, len(data), step):
            self.send(data[i : i + step])
            self.pause(every_s)

    def repeat(self, data: bytes, times: int, every_s: float = 0.0) -> None:
        for _ in range(times):
            self.send(data)
            self.pause(every_s)

    def send_all(self, pieces: Iterable[bytes], every_s: float = 0.0) -> None:
        for piece in pieces:
            self.send(piece)
            self.pause(every_s)

    def hold(self, up_to_s: float) -> None:
        """Keeps the connection open, sending nothing, until the client closes or `up_to_s`."""
        deadline = time.monotonic() + up_to_s
        while (left := deadline - time.monotonic()) > 0 and not self.stop.is_set():
            ready, _, _ = select.select([self.sock], [], [], min(left, 0.05))
            if ready:
                try:
                    if not self.sock.recv(65536):
                        raise ClientGone("closed")
                except OSError as exc:
                    raise ClientGone(str(exc)) from None

    def reset(self) -> None:
        """Ends with a reset (SO_LINGER 0) instead of a clean close."""
        self.reset_at_end = True


Script = Callable[[Peer], None]


@dataclass
class Served:
    name: str
    sent: int = 0  # bytes the script got out before it ended or the client went
    client_gone: bool = False
    done: threading.Event | None = None


class HostileServer:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._scripts: deque[tuple[Served, Script]] = deque()
        self._socks: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.served: list[Served] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    @property
    def address(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    def push(self, name: str, script: Script) -> Served:
        """Queues `script` for the next chat connection; its record fills in as it runs."""
        served = Served(name, done=threading.Event())
        with self._lock:
            self._scripts.append((served, script))
        return served

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed by close()
            with self._lock:
                self._socks.add(sock)
            t = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, sock: socket.socket) -> None:
        served: Served | None = None
        peer = Peer(sock, self._stop)
        try:
            sock.settimeout(SEND_TIMEOUT_S)
            head = _read_request(sock)
            if head.startswith(CHAT):
                with self._lock:
                    served, script = self._scripts.popleft() if self._scripts else (None, None)
                if served is None or script is None:
                    self.errors.append(f"a chat request with no script queued: {head[:80]!r}")
                    return
                try:
                    script(peer)
                except ClientGone:
                    served.client_gone = True
            elif head.startswith(b"GET /slots"):
                peer.send(_json_response(SLOTS))
            else:
                peer.send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        except ClientGone:
            pass
        except Exception:
            self.errors.append(traceback.format_exc())
        finally:
            if served is not None:
                served.sent = peer.sent
                self.served.append(served)
            if peer.reset_at_end:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            with self._lock:
                self._socks.discard(sock)
            if served is not None and served.done is not None:
                served.done.set()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            for sock in self._socks:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(JOIN_S)
        left = [served.name for served, _ in self._scripts]
        if self.errors or left:
            raise HostileServerError(f"errors: {self.errors}; scripts never run: {left}")


def _read_request(sock: socket.socket) -> bytes:
    """The request head and body (by Content-Length); raises ClientGone if it never completes."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            more = sock.recv(65536)
        except OSError as exc:
            raise ClientGone(str(exc)) from None
        if not more or len(data) > MAX_REQUEST_BYTES:
            raise ClientGone("the request never completed")
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        more = sock.recv(65536)
        if not more:
            raise ClientGone("the request body never completed")
        body += more
    return head


def _json_response(body: bytes, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


# ---- building replies and scripts ----------------------------------------------------------

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: close\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk around `data` (empty data: the last chunk)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(payload: bytes) -> bytes:
    """One SSE event carrying `payload`, as a chunk."""
    return chunk(b"data: " + payload + b"\n\n")


def send(*parts: bytes) -> Script:
    return lambda peer: peer.send(b"".join(parts))


def then_hold(first: Script, up_to_s: float = 10.0) -> Script:
    def script(peer: Peer) -> None:
        first(peer)
        peer.hold(up_to_s)

    return script


def head_then(head: bytes, rest: Callable[[Peer], None]) -> Script:
    def script(peer: Peer) -> None:
        peer.send(head)
        rest(peer)

    return script


def reset_after(data: bytes) -> Script:
    def script(peer: Peer) -> None:
        peer.send(data)
        peer.reset()

    return script


def stream_head(*extra: bytes, chunked: bool = True) -> bytes:
    lines = [b"HTTP/1.1 200 OK", b"Content-Type: text/event-stream", *extra]
    lines += [b"Transfer-Encoding: chunked"] if chunked else []
    return b"\r\n".join([*lines, b"", b""])
