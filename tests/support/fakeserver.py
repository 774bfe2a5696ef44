"""A scripted llama-server for tests (the M2a brief's section 6): real sockets, scripted replies.

`FakeServer(path)` listens on a Unix socket (or, given `(host, port)`, on TCP), serves each
connection on its own thread, and records every request. A connection carries one request (the
client sends `Connection: close`) and gets one `Reply`: a status line and headers, body pieces
with a delay before each, then an `End`:

- `End.CLOSE`: a clean close after the last piece;
- `End.CUT`: an abortive close (SO_LINGER 0): a reset on TCP; a Unix socket has no reset, so
  there the client sees EOF before the body is complete;
- `End.SILENCE`: nothing more is sent; the connection stays open until the client closes it or
  the server is closed.

The script: `expect(method, path, *replies)` queues replies used once each, in order;
`on(method, path, reply_or_handler)` answers any number of times once the queue is empty (a
handler gets the `Recorded` request and returns a Reply, so it can answer from the body, the time
or the state). Paths match without their query string. A request nothing answers gets a 500 that
names it and is kept as unexpected; a handler that raises gets a 500 too. `close()` raises
`FakeServerError` for either, for a malformed request, and for any failure in a server thread, so
a test cannot pass over them (`take_unexpected()` acknowledges what a test provoked on purpose).
Every wait is a bounded wait on a Condition, never a sleep.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import select
import socket
import struct
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

MAX_REQUEST_HEAD_BYTES = 65_536  # far above any request loopd sends; a bound against a runaway
JOIN_BOUND_S = 5.0  # close() waits this long, in all, for the connection threads
DEFAULT_WAIT_S = 5.0  # the bound of the wait_* helpers


class FakeServerError(AssertionError):
    """close() found unexpected or malformed requests, or a failure in a server thread."""


class End(enum.Enum):
    CLOSE = "close"
    CUT = "cut"
    SILENCE = "silence"


class Outcome(enum.Enum):
    """How a connection ended, as the server saw it."""

    OPEN = "open"  # still being served
    DONE = "done"  # the whole reply was sent and ended as scripted (CLOSE or CUT)
    CLIENT_CLOSED = "client_closed"  # the client closed before the reply was done, or in SILENCE
    STOPPED = "stopped"  # close() ended it
    INCOMPLETE = "incomplete"  # the client went away before a whole request arrived
    MALFORMED = "malformed"  # not an HTTP/1.1 request this server reads; answered 400


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


@dataclass(frozen=True, slots=True)
class Connection:
    index: int
    outcome: Outcome
    request: Recorded | None
    sent: int  # bytes of the reply sent so far


Handler = Callable[[Recorded], Reply]
Script = Reply | Handler
Event = bytes | dict[str, Any] | list[Any]

# ---- building replies ----------------------------------------------------------------------

LAST_CHUNK = b"0\r\n\r\n"
_SERVER_HEADERS = (("Server", "llama.cpp"), ("Access-Control-Allow-Origin", ""))  # as recorded


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
    headers = [*_SERVER_HEADERS, ("X-Accel-Buffering", "no"), ("Content-Type", "text/event-stream")]
    headers += [("Transfer-Encoding", "chunked")] if chunked else []
    headers.append(("Connection", "close"))
    return Reply(status, _phrase(status), headers, pieces, end, head_delay_s)


def json_reply(status: int, obj: Any, *, chunked: bool = False, end: End = End.CLOSE) -> Reply:
    """A JSON body with Content-Length, or chunked without one (as a router forwards it)."""
    body = orjson.dumps(obj)
    headers = [*_SERVER_HEADERS, ("Content-Type", "application/json; charset=utf-8")]
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


def _error_reply(status: int, message: str) -> Reply:
    return json_reply(status, {"error": {"code": status, "message": message, "type": "fake"}})


# ---- reading requests ----------------------------------------------------------------------


class _Malformed(Exception):
    pass


class _Gone(Exception):
    """The client closed (or reset) before a whole request arrived."""


class _Reader:
    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buf = conn, bytearray()

    def _fill(self) -> None:
        try:
            data = self.conn.recv(65_536)
        except OSError as exc:
            raise _Gone from exc
        if not data:
            raise _Gone
        self.buf += data

    def until(self, delim: bytes, limit: int, what: str) -> bytes:
        while (at := self.buf.find(delim)) < 0:
            if len(self.buf) > limit:
                raise _Malformed(f"{what} longer than {limit} bytes")
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


def _read_chunked(reader: _Reader) -> bytes:
    body = bytearray()
    while True:
        size_line = reader.until(b"\r\n", 1024, "chunk size line")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            raise _Malformed(f"bad chunk size line {size_line!r}") from None
        if size == 0:
            while reader.until(b"\r\n", MAX_REQUEST_HEAD_BYTES, "trailer"):
                pass  # trailers are read and dropped
            return bytes(body)
        body += reader.exactly(size)
        if reader.exactly(2) != b"\r\n":
            raise _Malformed("a chunk not followed by CRLF")


def _read_request(reader: _Reader, connection: int) -> Recorded:
    """One request off the connection (its index is set when it is recorded)."""
    head = reader.until(b"\r\n\r\n", MAX_REQUEST_HEAD_BYTES, "request head").decode("latin-1")
    request_line, *lines = head.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Malformed(f"bad request line {request_line!r}")
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise _Malformed(f"bad header line {line!r}")
        headers.append((name, value.strip()))
    fields = {k.lower(): v for k, v in headers}
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = _read_chunked(reader)
    elif (length := fields.get("content-length")) is not None:
        if not length.isdigit():
            raise _Malformed(f"bad Content-Length {length!r}")
        body = reader.exactly(int(length))
    else:
        body = b""
    parsed = None
    with contextlib.suppress(orjson.JSONDecodeError):
        parsed = orjson.loads(body) if body else None
    method, target, now, url = parts[0], parts[1], time.monotonic(), urlsplit(parts[1])
    query, pairs = dict(parse_qsl(url.query)), tuple(headers)
    return Recorded(-1, connection, method, target, url.path, query, pairs, body, parsed, now)


# ---- the server ----------------------------------------------------------------------------


class FakeServer:
    def __init__(
        self, address: Path | str | tuple[str, int], script: Handler | None = None
    ) -> None:
        """Binds and starts serving at once. `address`: a Unix socket path, or (host, port) for
        TCP (port 0 picks one; see `.address`). `script` answers what expect()/on() do not."""
        self._unix = not isinstance(address, tuple)
        self.address: Path | tuple[str, int] = (
            address if isinstance(address, tuple) else Path(address)
        )
        self._listener = socket.socket(socket.AF_UNIX if self._unix else socket.AF_INET)
        self._listener.bind(self._sockaddr())
        self._listener.listen(64)
        self._listener.setblocking(
            False
        )  # accept() only after poll(): a vanished peer can't block it
        if not self._unix:
            self.address = self._listener.getsockname()
        self._fallback = script
        self._cond = threading.Condition()
        self._queues: dict[tuple[str, str], deque[Script]] = {}
        self._always: dict[tuple[str, str], Script] = {}
        self._requests: list[Recorded] = []
        self._connections: list[Connection] = []
        self._live: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._unexpected: list[str] = []
        self._problems: list[str] = []
        self._stopping = self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._acceptor = threading.Thread(target=self._accept_loop, name="fake-accept", daemon=True)
        self._acceptor.start()

    def _sockaddr(self) -> str | tuple[str, int]:
        return self.address if isinstance(self.address, tuple) else str(self.address)

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:
            self.close()
        except FakeServerError as failure:
            if exc is None:
                raise
            exc.add_note(f"and the fake server reported: {failure}")  # don't mask the test's error

    # -- the script --
    def expect(self, method: str, path: str, *replies: Script) -> None:
        """Queues replies for `method path`, each used once, first in first out."""
        with self._cond:
            self._queues.setdefault((method.upper(), path), deque()).extend(replies)

    def on(self, method: str, path: str, script: Script) -> None:
        """Answers `method path` with this reply (or handler) every time its queue is empty."""
        with self._cond:
            self._always[(method.upper(), path)] = script

    def pending(self) -> dict[str, int]:
        """Queued replies not used yet, per "METHOD path"."""
        with self._cond:
            return {f"{m} {p}": len(q) for (m, p), q in self._queues.items() if q}

    # -- what happened --
    def requests(self, path: str | None = None) -> list[Recorded]:
        with self._cond:
            return [r for r in self._requests if path is None or r.path == path]

    def connections(self) -> list[Connection]:
        with self._cond:
            return list(self._connections)

    def take_unexpected(self) -> list[str]:
        """The unexpected and malformed requests so far; close() will not report these."""
        with self._cond:
            taken, self._unexpected = self._unexpected, []
            return taken

    def wait_until(
        self, predicate: Callable[[], object], what: str, timeout: float = DEFAULT_WAIT_S
    ) -> None:
        """Waits (bounded) until predicate() holds; it is called with the server's lock held."""
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                seen = [f"{r.method} {r.target}" for r in self._requests]
                raise AssertionError(f"waited {timeout:g} s for {what}; requests so far: {seen}")

    def wait_for_requests(
        self, n: int, path: str | None = None, timeout: float = DEFAULT_WAIT_S
    ) -> list[Recorded]:
        """Waits until at least n requests (to `path`, if given) have arrived; returns them."""

        def enough() -> bool:
            return sum(path is None or r.path == path for r in self._requests) >= n

        self.wait_until(enough, f"{n} request(s) to {path or 'any path'}", timeout)
        return self.requests(path)

    def wait_for_end(self, connection: int, timeout: float = DEFAULT_WAIT_S) -> Connection:
        """Waits until connection number `connection` (from 0) has ended; returns its record."""

        def ended() -> bool:
            conns = self._connections
            return len(conns) > connection and conns[connection].outcome is not Outcome.OPEN

        self.wait_until(ended, f"connection {connection} to end", timeout)
        return self.connections()[connection]

    def connect(self, timeout: float = DEFAULT_WAIT_S) -> socket.socket:
        """A client socket connected to this server, with a timeout on its calls."""
        client = socket.socket(socket.AF_UNIX if self._unix else socket.AF_INET)
        client.settimeout(timeout)
        client.connect(self._sockaddr())
        return client

    def close(self) -> None:
        """Stops accepting, ends every connection, joins the threads (bounded), removes the socket
        file; then raises FakeServerError if anything went wrong. A second call does nothing."""
        if self._closed:
            return
        self._closed = self._stopping = True
        self._wake_w.send(b"x")
        self._acceptor.join(JOIN_BOUND_S)
        with self._cond:
            live, threads = list(self._live), list(self._threads)
        for conn in live:
            with contextlib.suppress(OSError):  # already closed by its thread
                conn.shutdown(socket.SHUT_RDWR)  # wakes its thread from recv() or poll()
        deadline = time.monotonic() + JOIN_BOUND_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in [self._acceptor, *threads] if t.is_alive()]
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        if isinstance(self.address, Path):
            self.address.unlink(missing_ok=True)
        with self._cond:
            problems = self._problems + [f"unexpected request: {u}" for u in self._unexpected]
        problems += [f"threads still running after {JOIN_BOUND_S:g} s: {stuck}"] if stuck else []
        if problems:
            raise FakeServerError("fake server: " + "\n".join(problems))

    # -- the threads --
    def _accept_loop(self) -> None:
        poller = select.poll()
        poller.register(self._listener, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while self._wake_r.fileno() not in {fd for fd, _ in poller.poll()}:
                try:
                    conn, _ = self._listener.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(True)
                with self._cond:
                    index = len(self._connections)
                    self._connections.append(Connection(index, Outcome.OPEN, None, 0))
                    self._live.append(conn)
                    thread = threading.Thread(
                        target=self._serve,
                        args=(conn, index),
                        name=f"fake-conn-{index}",
                        daemon=True,
                    )
                    self._threads.append(thread)
                thread.start()
        except Exception:
            self._problem(f"accept loop failed:\n{traceback.format_exc()}")

    def _problem(self, text: str) -> None:
        with self._cond:
            self._problems.append(text)
            self._cond.notify_all()

    def _update(self, index: int, **changes: Any) -> None:
        with self._cond:
            self._connections[index] = replace(self._connections[index], **changes)
            self._cond.notify_all()

    def _serve(self, conn: socket.socket, index: int) -> None:
        outcome = Outcome.STOPPED
        try:
            try:
                request = _read_request(_Reader(conn), index)
            except _Gone:
                outcome = Outcome.STOPPED if self._stopping else Outcome.INCOMPLETE
                return
            except _Malformed as bad:
                with self._cond:
                    self._unexpected.append(f"malformed request on connection {index}: {bad}")
                self._send(conn, index, _error_reply(400, f"fake server: {bad}"))
                outcome = Outcome.MALFORMED
                return
            with self._cond:
                request = replace(request, index=len(self._requests))
                self._requests.append(request)
            self._update(index, request=request)  # notifies the waiters
            outcome = self._send(conn, index, self._route(request))
        except Exception:
            self._problem(f"connection {index} failed:\n{traceback.format_exc()}")
        finally:
            conn.close()  # after a CUT, SO_LINGER 0 makes this the reset
            with self._cond:
                self._live.remove(conn)
            self._update(index, outcome=outcome)

    def _route(self, request: Recorded) -> Reply:
        key, name = (request.method, request.path), f"{request.method} {request.target}"
        with self._cond:
            queue = self._queues.get(key)
            script = queue.popleft() if queue else self._always.get(key, self._fallback)
            if script is None:
                self._unexpected.append(name)
        if script is None:
            return _error_reply(500, f"fake server: nothing scripted for {name}")
        if isinstance(script, Reply):
            return script
        try:
            return script(request)
        except Exception:
            self._problem(f"the handler for {name} raised:\n{traceback.format_exc()}")
            return _error_reply(500, f"fake server: the handler for {name} raised")

    def _send(self, conn: socket.socket, index: int, reply: Reply) -> Outcome:
        sent = 0
        try:
            for piece in reply.wire():
                if piece.delay_s > 0 and (ended := self._hold(conn, piece.delay_s)):
                    return ended
                conn.sendall(piece.data)
                sent += len(piece.data)
                self._update(index, sent=sent)
        except OSError:  # EPIPE or ECONNRESET: the client went away mid-reply
            return Outcome.STOPPED if self._stopping else Outcome.CLIENT_CLOSED
        if reply.end is End.CUT:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif reply.end is End.SILENCE:
            return self._hold(conn, None) or Outcome.STOPPED
        return Outcome.DONE

    def _hold(self, conn: socket.socket, seconds: float | None) -> Outcome | None:
        """Sends nothing for `seconds` (None: for ever). Returns how the connection ended if the
        client closed it or close() stopped it meanwhile, else None. Bytes the client sends are
        read and dropped; its half-close counts as closing."""
        poller = select.poll()
        poller.register(conn, select.POLLIN)
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if not poller.poll(None if left is None else max(1, int(left * 1000) + 1)):
                continue  # timed out: the loop checks the deadline
            try:
                data = conn.recv(65_536)
            except OSError:
                data = b""
            if not data:
                return Outcome.STOPPED if self._stopping else Outcome.CLIENT_CLOSED
