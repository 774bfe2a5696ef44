"""A scripted llama-server for tests (the M2a brief's section 6): real sockets, scripted replies.

`FakeServer(path)` listens on a Unix socket (or, given `(host, port)`, on TCP), serves each
connection on its own thread, and records every request. A connection carries one request (the
client sends `Connection: close`) and gets one `Reply`: a status line and headers, body pieces
with a delay before each, then an `End` (tests/support/replies.py builds them):

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
import select
import socket
import struct
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tests.support.recorded import ClientGone, Malformed, Recorded, RequestReader, read_request
from tests.support.replies import End, Reply, error_reply

JOIN_BOUND_S = 5.0  # close() waits this long, in all, for the connection threads
DEFAULT_WAIT_S = 5.0  # the bound of the wait_* helpers


class FakeServerError(AssertionError):
    """close() found unexpected or malformed requests, or a failure in a server thread."""


class Outcome(enum.Enum):
    """How a connection ended, as the server saw it."""

    OPEN = "open"  # still being served
    DONE = "done"  # the whole reply was sent and ended as scripted (CLOSE or CUT)
    CLIENT_CLOSED = "client_closed"  # the client closed before the reply was done, or in SILENCE
    STOPPED = "stopped"  # close() ended it
    INCOMPLETE = "incomplete"  # the client went away before a whole request arrived
    MALFORMED = "malformed"  # not an HTTP/1.1 request this server reads; answered 400


@dataclass(frozen=True, slots=True)
class Connection:
    index: int
    outcome: Outcome
    request: Recorded | None
    sent: int  # bytes of the reply sent so far


Handler = Callable[[Recorded], Reply]
Script = Reply | Handler

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
                request = read_request(RequestReader(conn), index)
            except ClientGone:
                outcome = Outcome.STOPPED if self._stopping else Outcome.INCOMPLETE
                return
            except Malformed as bad:
                with self._cond:
                    self._unexpected.append(f"malformed request on connection {index}: {bad}")
                self._send(conn, index, error_reply(400, f"fake server: {bad}"))
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
            return error_reply(500, f"fake server: nothing scripted for {name}")
        if isinstance(script, Reply):
            return script
        try:
            return script(request)
        except Exception:
            self._problem(f"the handler for {name} raised:\n{traceback.format_exc()}")
            return error_reply(500, f"fake server: the handler for {name} raised")

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
