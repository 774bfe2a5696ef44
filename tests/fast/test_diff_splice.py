"""Differential tests for pump: both twins on random streams over real socketpairs and pipes.

Hypothesis draws the bytes, how they are cut into writes, and where the writer half-closes. Each
twin then carries the same stream; both must deliver the bytes sent before the half-close, return
that count, and pass the EOF on (the readers return). Real sockets and threads make an example
cost milliseconds, so the example counts are modest and there is no deadline.
"""

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from boxmaker._fast import _splice_c, _splice_py
from tests.support.fast.worker import Worker, receive_until_eof

Pump = Callable[[int, int], int]
TWINS: dict[str, Pump] = {"py": _splice_py.pump, "c": _splice_c.pump}

WRITES = st.lists(st.binary(min_size=1, max_size=8192), max_size=24)
EXAMPLES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read_until_eof(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def forward(pump: Pump, src: socket.socket, dst: socket.socket) -> int:
    moved = pump(src.fileno(), dst.fileno())
    dst.shutdown(socket.SHUT_WR)  # as inferproxy does: pass the half-close on
    return moved


@dataclass(frozen=True)
class Outcome:
    at_server: bytes
    at_client: bytes
    moved_up: int
    moved_down: int


def converse(pump: Pump, events: list[tuple[str, bytes]]) -> Outcome:
    """client <-> [near | far] <-> server through two pumps, playing `events` in order.

    ("up", b) the client sends b; ("down", b) the server sends b; ("close", b"") the client
    half-closes (later "up" events are dropped). The server half-closes after the last event.
    """
    client, near = socket.socketpair()
    far, server = socket.socketpair()
    try:
        up = Worker("pump up", forward, pump, near, far)
        down = Worker("pump down", forward, pump, far, near)
        at_server = Worker("server reads", receive_until_eof, server)
        at_client = Worker("client reads", receive_until_eof, client)
        client_open = True
        for what, chunk in events:
            if what == "close" and client_open:
                client.shutdown(socket.SHUT_WR)
                client_open = False
            elif what == "up" and client_open:
                client.sendall(chunk)
            elif what == "down":
                server.sendall(chunk)
        if client_open:
            client.shutdown(socket.SHUT_WR)
        server.shutdown(socket.SHUT_WR)
        return Outcome(at_server.result(), at_client.result(), up.result(), down.result())
    finally:
        for s in (client, near, far, server):
            s.close()


@st.composite
def conversations(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    ups = [("up", b) for b in draw(WRITES, label="client writes")]
    downs = [("down", b) for b in draw(WRITES, label="server writes")]
    return draw(st.permutations([*ups, *downs, ("close", b"")]), label="order")


def expected_outcome(events: list[tuple[str, bytes]]) -> Outcome:
    close = events.index(("close", b""))
    up = b"".join(b for what, b in events[:close] if what == "up")
    down = b"".join(b for what, b in events if what == "down")
    return Outcome(up, down, len(up), len(down))


@EXAMPLES
@given(events=conversations())
@example(events=[("close", b"")])
@example(events=[("close", b""), ("down", b"after the half-close")])
@example(events=[("up", b"x" * 8192), ("down", b"y"), ("close", b""), ("up", b"dropped")])
def test_twins_agree_on_a_proxied_conversation(events: list[tuple[str, bytes]]) -> None:
    note(f"{len(events)} events, half-close at {events.index(('close', b''))}")
    outcomes = {name: converse(pump, events) for name, pump in TWINS.items()}
    assert outcomes["py"] == outcomes["c"]
    assert outcomes["c"] == expected_outcome(events)


class Channel:
    """A one-way byte channel as raw fds, a socketpair or a pipe: write to w, read from r."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "pipe":
            self.r, self.w = os.pipe()
        else:
            a, b = socket.socketpair()
            self.w, self.r = a.detach(), b.detach()
        self._open = {self.r, self.w}

    def half_close(self) -> None:
        if self.kind == "pipe":
            self._close(self.w)
            return
        s = socket.socket(fileno=self.w)
        try:
            s.shutdown(socket.SHUT_WR)
        finally:
            s.detach()

    def _close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    def close(self) -> None:
        for fd in list(self._open):
            self._close(fd)


def one_way(pump: Pump, src_kind: str, dst_kind: str, writes: list[bytes]) -> tuple[bytes, int]:
    """writer -> src channel -> pump -> dst channel -> reader; returns (bytes read, count)."""
    src, dst = Channel(src_kind), Channel(dst_kind)
    try:
        worker = Worker("pump", pump, src.r, dst.w)
        reader = Worker("reader", read_until_eof, dst.r)
        for chunk in writes:
            view = memoryview(chunk)
            while view:
                view = view[os.write(src.w, view) :]
        src.half_close()
        moved: int = worker.result()
        dst.half_close()
        return reader.result(), moved
    finally:
        src.close()
        dst.close()


@EXAMPLES
@given(
    writes=WRITES,
    src_kind=st.sampled_from(["socket", "pipe"]),
    dst_kind=st.sampled_from(["socket", "pipe"]),
)
@example(writes=[], src_kind="pipe", dst_kind="pipe")
def test_twins_agree_one_way_over_sockets_and_pipes(
    writes: list[bytes], src_kind: str, dst_kind: str
) -> None:
    expected = b"".join(writes)
    outcomes = {name: one_way(pump, src_kind, dst_kind, writes) for name, pump in TWINS.items()}
    assert outcomes["py"] == outcomes["c"]
    assert outcomes["c"] == (expected, len(expected))
