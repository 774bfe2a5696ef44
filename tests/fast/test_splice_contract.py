"""boxmaker._fast.splice.pump's contract, on both twins: what any pump promises its caller.

Over real socketpairs, TCP loopback, pipes and files: every byte arrives, in order and at once;
a half-close ends one direction only; errors and bad fds come out as OSError with nothing leaked.
How the compiled twin keeps the promise (its pipe, poll, signals) is test_splice_mechanism.py.
Each pump runs in a thread and the test plays both peers. Every wait is bounded (BOUND_S): a pump
that hangs fails the test with a message instead of hanging the suite.
"""

import errno
import hashlib
import os
import random
import socket
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

import boxmaker._fast.splice as selected
from boxmaker._fast import IMPLEMENTATIONS, NO_EXTENSIONS, _splice_c, _splice_py
from tests.support.fast.splice import (
    KIB,
    MIB,
    OneWay,
    Proxy,
    Pump,
    Sockets,
    digest_until_eof,
    ends,
    open_fds,
    payload,
    receive_exactly,
    send_all_then_eof,
)
from tests.support.fast.worker import Worker, receive_until_eof

# --- Which twin is in use ------------------------------------------------------------------------


def test_selected_twin_is_the_compiled_one_unless_disabled() -> None:
    if NO_EXTENSIONS:
        assert selected.pump is _splice_py.pump
        assert IMPLEMENTATIONS["splice"] == "py"
        assert selected.METHOD == "read/write"
    else:
        assert selected.pump.__module__ == "boxmaker._fast._splice_c"
        assert selected.pump is _splice_c.pump
        assert IMPLEMENTATIONS["splice"] == "c"
        assert selected.METHOD == "splice+read/write"


def test_twins_name_their_mechanism() -> None:
    assert _splice_c.METHOD == "splice+read/write"
    assert _splice_py.METHOD == "read/write"


# --- Bytes arrive exactly ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [KIB, MIB, 32 * MIB], ids=["1KiB", "1MiB", "32MiB"])
def test_payloads_copied_exactly_both_ways_at_once(
    pump: Pump, sockets: Sockets, kind: str, size: int
) -> None:
    up_data, down_data = payload(size, 1), payload(size, 2)
    proxy = Proxy(pump, sockets, kind)
    senders = [
        Worker("client sends", send_all_then_eof, proxy.client, up_data),
        Worker("server sends", send_all_then_eof, proxy.server, down_data),
    ]
    at_server = Worker("server reads", digest_until_eof, proxy.server)
    at_client = Worker("client reads", digest_until_eof, proxy.client)

    assert at_server.result() == (size, hashlib.sha256(up_data).hexdigest())
    assert at_client.result() == (size, hashlib.sha256(down_data).hexdigest())
    assert proxy.up.result() == size
    assert proxy.down.result() == size
    for sender in senders:
        sender.result()


def test_many_small_writes_arrive_exactly_and_in_order(
    pump: Pump, sockets: Sockets, kind: str
) -> None:
    rng = random.Random(3)
    writes = [rng.randbytes(rng.randint(1, 100)) for _ in range(10_000)]
    path = OneWay(pump, sockets, kind)

    def send_each() -> None:
        for w in writes:
            path.writer.sendall(w)
        path.writer.shutdown(socket.SHUT_WR)

    sender = Worker("writer", send_each)
    received = Worker("reader", receive_until_eof, path.reader)
    assert path.pump.result() == sum(map(len, writes))
    path.dst.shutdown(socket.SHUT_WR)  # the pump shuts nothing down: pass the EOF on
    assert received.result() == b"".join(writes)
    sender.result()


def test_small_writes_are_forwarded_at_once(pump: Pump, sockets: Sockets, kind: str) -> None:
    # Ping-pong: each 100-byte write must reach the far end before anything more is sent. A pump
    # that corks small writes (SPLICE_F_MORE -> MSG_MORE holds them ~200 ms on TCP) takes seconds.
    proxy = Proxy(pump, sockets, kind)
    rng = random.Random(4)
    started = time.monotonic()
    for _ in range(10):
        ping, pong = rng.randbytes(100), rng.randbytes(100)
        proxy.client.sendall(ping)
        assert receive_exactly(proxy.server, 100, timeout=5.0) == ping
        proxy.server.sendall(pong)
        assert receive_exactly(proxy.client, 100, timeout=5.0) == pong
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, f"20 small writes took {elapsed:.2f} s through the pumps"


# --- Half-close ----------------------------------------------------------------------------------


def test_eof_ends_one_direction_while_the_other_keeps_flowing(
    pump: Pump, sockets: Sockets, kind: str
) -> None:
    proxy = Proxy(pump, sockets, kind)
    proxy.client.sendall(b"request")
    proxy.client.shutdown(socket.SHUT_WR)

    assert proxy.up.result() == len(b"request")
    assert receive_until_eof(proxy.server) == b"request"  # the half-close was passed on
    assert proxy.down.thread.is_alive()

    replies = [payload(50_000, 5), b"tail"]
    received = Worker("client reads", receive_until_eof, proxy.client)
    for reply in replies:
        proxy.server.sendall(reply)
    proxy.server.shutdown(socket.SHUT_WR)
    assert received.result() == b"".join(replies)
    assert proxy.down.result() == sum(map(len, replies))


# --- Errors and descriptors ----------------------------------------------------------------------


def test_dst_closed_by_its_peer_mid_stream_raises(pump: Pump, sockets: Sockets, kind: str) -> None:
    path = OneWay(pump, sockets, kind)
    chunk = payload(64 * KIB, 6)

    def keep_sending() -> None:
        while True:
            path.writer.sendall(chunk)  # ends in an OSError once the test tears the sockets down

    sender = Worker("writer", keep_sending)
    receive_exactly(path.reader, 256 * KIB)  # the stream is flowing through the pump
    open_during = open_fds()
    path.reader.close()

    error = path.pump.failure()
    assert isinstance(error, OSError)
    assert error.errno in (errno.EPIPE, errno.ECONNRESET), error
    # The c twin's pipe was open while it copied; now it is gone (and so is the closed reader).
    leaked = open_fds() - open_during
    assert not leaked, f"fds opened and not closed: {leaked}"
    sockets.close()
    assert isinstance(sender.failure(), OSError)


def test_pump_opens_no_fd_it_does_not_close(pump: Pump, sockets: Sockets, kind: str) -> None:
    src_kind, dst_kind = ends(kind)
    writer, src = sockets.pair(src_kind)
    dst, reader = sockets.pair(dst_kind)
    before = open_fds()
    sender = Worker("writer", send_all_then_eof, writer, payload(2 * MIB, 7))
    received = Worker("reader", digest_until_eof, reader)
    assert pump(src.fileno(), dst.fileno()) == 2 * MIB
    assert open_fds() == before
    dst.shutdown(socket.SHUT_WR)
    assert received.result() == (2 * MIB, hashlib.sha256(payload(2 * MIB, 7)).hexdigest())
    sender.result()


def closed_fd() -> int:
    r, w = os.pipe()
    os.close(w)
    os.close(r)
    return r


def test_bad_src_fd_raises_ebadf(pump: Pump, sockets: Sockets) -> None:
    _, dst = sockets.pair("unix")
    for bad in (closed_fd(), -1):
        before = open_fds()
        with pytest.raises(OSError, match="Bad file descriptor") as caught:
            pump(bad, dst.fileno())
        assert caught.value.errno == errno.EBADF, caught.value
        assert open_fds() == before


def test_bad_dst_fd_raises_ebadf_before_taking_any_input(pump: Pump, sockets: Sockets) -> None:
    writer, src = sockets.pair("unix")
    writer.sendall(b"kept")
    for bad in (closed_fd(), -1):
        before = open_fds()
        with pytest.raises(OSError, match="Bad file descriptor") as caught:
            pump(src.fileno(), bad)
        assert caught.value.errno == errno.EBADF, caught.value
        assert open_fds() == before
    assert receive_exactly(src, 4) == b"kept"


# --- Pipes and files: direct splice and the read/write fallback -----------------------------------

# Where the compiled twin splices and where it must fall back (see the next test):
#   socket/file -> socket/file: through its own pipe       src or dst a pipe: one direct splice
#   src procfs (/proc/self/environ): the first splice is refused, read/write from the start
#   dst append (a file opened O_APPEND): the first splice out is refused, after bytes are already
#   in the pipe; they are drained through the buffer first
SOURCES = ["socket", "pipe", "file", "procfs"]
DESTINATIONS = ["socket", "pipe", "file", "append"]


def open_source(kind: str, data: bytes, stack: ExitStack, sockets: Sockets) -> tuple[int, bytes]:
    """An fd that yields `data` (procfs: its own content) then EOF; returns (fd, expected)."""
    if kind == "socket":
        writer, src = sockets.pair("unix")
        Worker("socket writer", send_all_then_eof, writer, data)
        return src.fileno(), data
    if kind == "pipe":
        r, w = os.pipe()
        stack.callback(os.close, r)

        def write_then_close() -> None:
            with open(w, "wb") as f:
                f.write(data)

        Worker("pipe writer", write_then_close)
        return r, data
    if kind == "file":
        f = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (the stack closes it)
        f.write(data)
        f.flush()
        f.seek(0)
        return f.fileno(), data
    assert kind == "procfs"
    expected = Path("/proc/self/environ").read_bytes()
    fd = os.open("/proc/self/environ", os.O_RDONLY)
    stack.callback(os.close, fd)
    return fd, expected


def open_destination(
    kind: str, stack: ExitStack, sockets: Sockets, tmp_path: Path
) -> tuple[int, Callable[[], bytes]]:
    """An fd to pump into, and a finish() that passes EOF on and returns what arrived."""
    if kind == "socket":
        dst, reader = sockets.pair("unix")
        received = Worker("socket reader", receive_until_eof, reader)

        def finish_socket() -> bytes:
            dst.shutdown(socket.SHUT_WR)
            return received.result()  # type: ignore[no-any-return]

        return dst.fileno(), finish_socket
    if kind == "pipe":
        r, w = os.pipe()

        def read_then_close() -> bytes:
            with open(r, "rb") as f:
                return f.read()

        drained = Worker("pipe reader", read_then_close)

        def finish_pipe() -> bytes:
            os.close(w)
            return drained.result()  # type: ignore[no-any-return]

        return w, finish_pipe
    path = tmp_path / "dst"
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if kind == "append" else 0)
    fd = os.open(path, flags)
    stack.callback(os.close, fd)
    prefix = b"prefix:" if kind == "append" else b""
    os.write(fd, prefix)
    return fd, lambda: path.read_bytes()[len(prefix) :]


@pytest.mark.parametrize("dst_kind", DESTINATIONS)
@pytest.mark.parametrize("src_kind", SOURCES)
def test_pipes_and_files_copy_exactly(
    pump: Pump, sockets: Sockets, tmp_path: Path, src_kind: str, dst_kind: str
) -> None:
    data = payload(3 * MIB + 17, 8)
    with ExitStack() as stack:
        src_fd, expected = open_source(src_kind, data, stack, sockets)
        dst_fd, finish = open_destination(dst_kind, stack, sockets, tmp_path)
        before = open_fds()
        assert Worker("pump", pump, src_fd, dst_fd).result() == len(expected)
        assert not open_fds() - before  # (a pipe source's writer closes its end meanwhile)
        got = finish()
    assert len(got) == len(expected)
    assert got == expected
