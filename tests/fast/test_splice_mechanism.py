"""How boxmaker._fast.splice.pump keeps its contract: the compiled twin's mechanism.

It splices through a pipe of its own except from a Unix socket to TCP; it falls back to read/write
where the kernel refuses splice; it lets other threads run while it waits, and waits in poll(2)
so traffic the other way does not wake it; signals during a blocked read or write are retried
with no byte lost, and an exception from a handler ends it. The contract itself (bytes, order,
half-close, errors) is test_splice_contract.py. Every wait is bounded (BOUND_S).
"""

import contextlib
import errno
import hashlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boxmaker._fast import _splice_c
from tests.support.fast.splice import (
    KIB,
    MIB,
    POLL_S,
    OneWay,
    Pump,
    Sockets,
    blocked_on,
    digest_until_eof,
    ends,
    open_fds,
    payload,
    receive_exactly,
    send_all_then_eof,
    set_receive_timeout,
    wait_blocked,
)
from tests.support.fast.worker import BOUND_S, Worker, receive_until_eof
from tests.support.procs import wait_for

# --- Which mechanism for which socket pair -------------------------------------------------------


def open_pipes() -> set[int]:
    pipes = set()
    for fd in open_fds():
        # The listing's own fd is gone by now: readlink fails on it.
        with contextlib.suppress(FileNotFoundError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                pipes.add(fd)
    return pipes


# The compiled twin splices through a pipe of its own (two fds) except from a Unix socket to TCP,
# where a read/write loop is faster (measured: docs/fast-paths.md); the Python twin never splices.
@pytest.mark.parametrize(
    ("route", "c_splices"),
    [("unix>tcp", False), ("tcp>unix", True), ("unix", True), ("tcp", True)],
)
def test_pump_splices_except_from_unix_to_tcp(
    pump: Pump, sockets: Sockets, route: str, c_splices: bool
) -> None:
    data = payload(4 * MIB + 3, 10)
    before = open_pipes()
    path = OneWay(pump, sockets, route)
    wait_blocked(path.pump, path.src.fileno(), "the pump to block reading src")
    made = open_pipes() - before
    assert len(made) == (2 if pump is _splice_c.pump and c_splices else 0), (
        f"{route}: the pump holds these pipe fds while it waits: {sorted(made)}"
    )
    sender = Worker("writer", send_all_then_eof, path.writer, data)
    received = Worker("reader", digest_until_eof, path.reader)
    assert path.pump.result() == len(data)
    path.dst.shutdown(socket.SHUT_WR)
    assert received.result() == (len(data), hashlib.sha256(data).hexdigest())
    sender.result()
    assert open_pipes() == before


# --- The kernel's refusals behind the fallback ---------------------------------------------------


def test_kernel_refuses_splice_where_the_fallback_is_needed(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        environ = os.open("/proc/self/environ", os.O_RDONLY)
        with pytest.raises(OSError, match="Invalid argument") as refused_in:
            os.splice(environ, w, 16)
        os.close(environ)
        os.write(w, b"x")
        append = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        with pytest.raises(OSError, match="Invalid argument") as refused_out:
            os.splice(r, append, 1)
        os.close(append)
    finally:
        os.close(r)
        os.close(w)
    assert refused_in.value.errno == errno.EINVAL
    assert refused_out.value.errno == errno.EINVAL


# --- Threads and signals -------------------------------------------------------------------------


def test_other_threads_run_while_a_pump_waits_for_data(
    pump: Pump, sockets: Sockets, unix_src: str
) -> None:
    writer, src = sockets.pair("unix")
    dst, reader = sockets.pair(ends(unix_src)[1])
    # A pump that kept the GIL while blocked would stop this very test; SO_RCVTIMEO makes it give
    # up (EAGAIN) after 10 s, so the test fails below instead of hanging.
    set_receive_timeout(src, 10)
    counted = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    worker = Worker("pump", pump, src.fileno(), dst.fileno())
    counter = Worker("counter", count)
    try:
        wait_blocked(worker, src.fileno(), "the pump to block reading src")
        start = counted[0]
        wait_for(
            lambda: counted[0] > start + 100_000, "the counter thread to advance", BOUND_S, POLL_S
        )
        assert worker.thread.native_id is not None
        assert blocked_on(worker.thread.native_id, src.fileno()), "the pump stopped waiting"
    finally:
        stop.set()
    counter.result()
    send_all_then_eof(writer, b"late")
    assert worker.result() == 4
    dst.shutdown(socket.SHUT_WR)
    assert receive_until_eof(reader) == b"late"


def voluntary_switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches in /proc/self/task/{tid}/status")


@pytest.mark.parametrize("route", ["unix", "unix>tcp"])
def test_a_pump_waiting_on_a_unix_socket_sleeps_while_the_other_way_flows(
    sockets: Sockets, route: str
) -> None:
    # inferproxy's client socket: one thread pumps from it while the other writes answers to it.
    # Each answer the client reads wakes whatever sleeps in a read on that socket (the kernel
    # signals new send space on the one wait queue). The compiled pump waits in poll(POLLIN), which
    # that does not wake; the Python twin blocks in read(2) and would wake every time.
    rounds = 200
    client, near = sockets.pair("unix")
    far, server = sockets.pair(ends(route)[1])
    worker = Worker("pump", _splice_c.pump, near.fileno(), far.fileno())
    wait_blocked(worker, near.fileno(), "the pump to wait for the client")
    tid = worker.thread.native_id
    assert tid is not None
    before = voluntary_switches(tid)
    for _ in range(rounds):
        near.sendall(b"a" * 100)  # what the other direction's pump does
        receive_exactly(client, 100)
    woken = voluntary_switches(tid) - before
    assert woken < rounds // 10, f"the pump woke {woken} times in {rounds} answers, none for it"
    send_all_then_eof(client, b"request")
    assert worker.result() == len(b"request")
    far.shutdown(socket.SHUT_WR)
    assert receive_until_eof(server) == b"request"


def test_receive_timeout_on_a_unix_source_still_ends_a_waiting_pump(
    pump: Pump, sockets: Sockets, unix_src: str
) -> None:
    # The compiled pump waits in poll(), not in a read: SO_RCVTIMEO must still end the wait with
    # the EAGAIN a blocking read reports.
    _, src = sockets.pair("unix")
    dst, _ = sockets.pair(ends(unix_src)[1])
    set_receive_timeout(src, 1)
    started = time.monotonic()
    worker = Worker("pump", pump, src.fileno(), dst.fileno())
    assert isinstance(worker.failure(), BlockingIOError)
    assert 0.9 < time.monotonic() - started < BOUND_S


@pytest.fixture
def sigusr1_count() -> Iterator[list[int]]:
    """Counts SIGUSR1 (the handler runs in the main thread); restores the old handler afterwards."""
    handled: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    yield handled
    signal.signal(signal.SIGUSR1, old)


def interrupt(worker: Worker, fd: int, handled: list[int], times: int, what: str) -> None:
    """Signals the worker's thread `times` times, each while it is blocked on fd."""
    assert worker.thread.ident is not None
    for _ in range(times):
        wait_blocked(worker, fd, what)
        expected = len(handled) + 1
        signal.pthread_kill(worker.thread.ident, signal.SIGUSR1)
        wait_for(lambda: len(handled) == expected, "the signal handler to run", BOUND_S, POLL_S)  # noqa: B023
    wait_blocked(worker, fd, f"{what} again after the signals")


def test_signals_during_a_blocked_read_are_retried(
    pump: Pump, sockets: Sockets, sigusr1_count: list[int], unix_src: str
) -> None:
    writer, src = sockets.pair("unix")
    dst, reader = sockets.pair(ends(unix_src)[1])
    set_receive_timeout(src, 10)
    worker = Worker("pump", pump, src.fileno(), dst.fileno())
    # Each signal interrupts the pump thread's blocked call (EINTR); the pump must go back in.
    interrupt(worker, src.fileno(), sigusr1_count, 3, "the pump to block reading src")
    send_all_then_eof(writer, b"after signals")
    assert worker.result() == len(b"after signals")
    dst.shutdown(socket.SHUT_WR)
    assert receive_until_eof(reader) == b"after signals"


def test_signals_during_a_blocked_write_lose_no_bytes(
    pump: Pump, sockets: Sockets, sigusr1_count: list[int], unix_src: str
) -> None:
    data = payload(8 * MIB, 9)
    # A send buffer smaller than one read makes the pump block in the middle of a write. (A TCP
    # receive buffer only grows while its owner reads, so an idle reader stops TCP too.)
    path = OneWay(pump, sockets, unix_src, dst_send_buffer=32 * KIB)
    sender = Worker("writer", send_all_then_eof, path.writer, data)
    # Nobody reads yet, so the pump blocks writing to dst. A signal then cuts the write short: the
    # call returns the bytes it took (a partial write), and the pump must write the rest.
    interrupt(path.pump, path.dst.fileno(), sigusr1_count, 3, "the pump to block writing dst")
    received = Worker("reader", digest_until_eof, path.reader)
    assert path.pump.result() == len(data)
    path.dst.shutdown(socket.SHUT_WR)
    assert received.result() == (len(data), hashlib.sha256(data).hexdigest())
    sender.result()


class Interrupted(Exception):
    pass


def test_an_exception_from_a_signal_handler_ends_a_blocked_pump(
    pump: Pump, sockets: Sockets, unix_src: str
) -> None:
    def raise_interrupted(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    _, src = sockets.pair("unix")
    dst, _ = sockets.pair(ends(unix_src)[1])
    set_receive_timeout(src, 10)
    main_tid, main_ident = threading.get_native_id(), threading.get_ident()

    def signal_once_blocked() -> None:
        wait_for(
            lambda: blocked_on(main_tid, src.fileno()),
            "the pump to block reading src",
            BOUND_S,
            POLL_S,
        )
        signal.pthread_kill(main_ident, signal.SIGUSR1)

    before = open_fds()
    old = signal.signal(signal.SIGUSR1, raise_interrupted)
    try:
        signaller = Worker("signaller", signal_once_blocked)
        # Python handlers run in the main thread only, so the pump runs here.
        with pytest.raises(Interrupted):
            pump(src.fileno(), dst.fileno())
    finally:
        signal.signal(signal.SIGUSR1, old)
    signaller.result()
    assert open_fds() == before
