"""A Unix socket in front of another that keeps every byte of each connection, both ways.

`make verify-device` puts one between loopd and inferproxy to capture every request the checks
send on the way to the server; the real-server tests (tests/loopd) fold the exact stream the
client read with it. Each connection is copied by two threads; nothing is parsed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

BOUND = 30.0  # seconds: a connection's close after its request; a copy thread's end at stop()


@dataclass
class Exchange:
    """One connection through the Tee: the bytes each way; `closed` once both ways have ended."""

    request: bytearray = field(default_factory=bytearray)
    response: bytearray = field(default_factory=bytearray)
    closed: threading.Event = field(default_factory=threading.Event)
    _ended: int = 0

    def wait_closed(self) -> None:
        if not self.closed.wait(BOUND):
            raise AssertionError(f"the tee's connection stayed open {BOUND:g} s after the request")


class Tee:
    """A Unix socket in front of another: copies both ways and keeps every byte of each connection.

    It lets a test fold the exact stream the client read, independently of the client.
    """

    def __init__(self, listen: Path, upstream: Path) -> None:
        self.listen = listen
        self.upstream = upstream
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(listen))
        self._listener.listen(16)
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            far = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                far.connect(str(self.upstream))
            except OSError:
                near.close()  # as a dead proxy would: the client sees a closed connection
                far.close()
                continue
            ex = Exchange()
            self.exchanges.append(ex)
            for src, dst, into in ((near, far, ex.request), (far, near, ex.response)):
                t = threading.Thread(target=self._copy, args=(ex, src, dst, into), daemon=True)
                self._threads.append(t)
                t.start()

    def _copy(self, ex: Exchange, src: socket.socket, dst: socket.socket, into: bytearray) -> None:
        # Reads `src` to its end even when `dst` has gone (a client closes once it has what it
        # needs): the recording keeps every byte the sender wrote.
        forwarding = True
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            into += data
            if forwarding:
                try:
                    dst.sendall(data)
                except OSError:
                    forwarding = False
        if forwarding:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)  # pass the half-close on
        with self._lock:
            ex._ended += 1
            last = ex._ended == 2
        if last:
            src.close()
            dst.close()
            ex.closed.set()

    def chat_exchanges(self) -> list[Exchange]:
        return [ex for ex in self.exchanges if ex.request.startswith(b"POST /v1/chat/completions ")]

    def stop(self) -> None:
        self._listener.close()
        for t in self._threads:
            t.join(BOUND)
