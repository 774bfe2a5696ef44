"""boxmaker._fast.splice.pump on both twins, over real socketpairs, TCP loopback, pipes and files.

Each pump runs in a thread and the test plays both peers. Every wait is bounded (BOUND_S): a pump
that hangs fails the test with a message instead of hanging the suite. Sockets given to a pump are
never put in timeout mode (that would make their fds non-blocking); SO_RCVTIMEO is used instead
where a pump that holds the GIL must be made to give up.
"""

import contextlib
import errno
import hashlib
import os
import random
import signal
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import boxmaker._fast.splice as selected
from boxmaker._fast import IMPLEMENTATIONS, NO_EXTENSIONS, _splice_c, _splice_py
from tests.support.worker import BOUND_S, Worker, receive_until_eof

Pump = Callable[[int, int], int]

KIB = 1024
MIB = 1024 * KIB


# --- Fixtures and helpers ------------------------------------------------------------------------


@pytest.fixture(params=[_splice_py.pump, _splice_c.pump], ids=["py", "c"])
def pump(request: pytest.FixtureRequest) -> Pump:
    return request.param  # type: ignore[no-any-return]


class Sockets:
    """Makes connected pairs; close() shuts every one down (that wakes blocked pumps) and closes."""

    def __init__(self) -> None:
        self.all: list[socket.socket] = []

    def pair(self, kind: str) -> tuple[socket.socket, socket.socket]:
        if kind == "unix":
            a, b = socket.socketpair()
        else:
            with socket.create_server(("127.0.0.1", 0)) as listener:
                a = socket.create_connection(listener.getsockname())
                b, _ = listener.accept()
            # Nagle would hold small segments for the peer's delayed ACK; the tests time the pump.
            for s in (a, b):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.all += [a, b]
        return a, b

    def close(self) -> None:
        """Shuts every socket down, waits for the test's workers to see it, then closes them."""
        for s in self.all:
            with contextlib.suppress(OSError):  # already shut down by the test
                s.shutdown(socket.SHUT_RDWR)
        for worker in Worker.started:
            worker.thread.join(BOUND_S)
        alive = [w.name for w in Worker.started if w.thread.is_alive()]
        for s in self.all:
            s.close()
        assert not alive, f"still running {BOUND_S} s after their sockets were shut down: {alive}"


@pytest.fixture
def sockets() -> Iterator[Sockets]:
    Worker.started.clear()
    made = Sockets()
    yield made
    made.close()
    Worker.started.clear()


# A route names the socket kind on the client side of the pump, then ">" and the upstream side
# ("unix>tcp" is inferproxy's). A lone kind is the same on both sides.
ROUTES = ["unix", "tcp", "unix>tcp", "tcp>unix"]


def ends(route: str) -> tuple[str, str]:
    near, _, far = route.partition(">")
    return near, far or near


@pytest.fixture(params=ROUTES)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=["unix", "unix>tcp"])
def unix_src(request: pytest.FixtureRequest) -> str:
    """Routes from a Unix socket: to a Unix socket (splice) and to TCP (read/write)."""
    return request.param  # type: ignore[no-any-return]


@cache
def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def forward(pump: Pump, src: socket.socket, dst: socket.socket) -> int:
    """One direction of a proxy, as inferproxy does it: pump, then pass the half-close on."""
    moved = pump(src.fileno(), dst.fileno())
    dst.shutdown(socket.SHUT_WR)
    return moved


def send_all_then_eof(sock: socket.socket, data: bytes) -> None:
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)


def digest_until_eof(sock: socket.socket) -> tuple[int, str]:
    h = hashlib.sha256()
    count = 0
    while chunk := sock.recv(MIB):
        h.update(chunk)
        count += len(chunk)
    return count, h.hexdigest()


def receive_exactly(sock: socket.socket, n: int, timeout: float = BOUND_S) -> bytes:
    """For test-side sockets only (settimeout makes the fd non-blocking)."""
    sock.settimeout(timeout)
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, f"EOF after {len(got)} of {n} bytes"
        got += chunk
    return got


class Proxy:
    """client <-> [near | far] <-> server with two pumps, near->far and far->near."""

    def __init__(self, pump: Pump, sockets: Sockets, kind: str) -> None:
        near_kind, far_kind = ends(kind)
        self.client, near = sockets.pair(near_kind)
        far, self.server = sockets.pair(far_kind)
        self.up = Worker("pump up", forward, pump, near, far)
        self.down = Worker("pump down", forward, pump, far, near)


class OneWay:
    """writer -> [src | dst] -> reader through one pump."""

    def __init__(
        self, pump: Pump, sockets: Sockets, kind: str, dst_send_buffer: int | None = None
    ) -> None:
        src_kind, dst_kind = ends(kind)
        self.writer, self.src = sockets.pair(src_kind)
        self.dst, self.reader = sockets.pair(dst_kind)
        if dst_send_buffer is not None:
            self.dst.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, dst_send_buffer)
        self.pump = Worker("pump", pump, self.src.fileno(), self.dst.fileno())


# poll(2) on x86_64 and ppoll(2) there and on arm64: the compiled pump waits for a Unix source's
# input in poll (see _splice_c.pyx), glibc's poll() makes one of these two calls.
POLL_SYSCALLS = {"x86_64": {7, 271}, "aarch64": {73}}.get(os.uname().machine, set())


def polled_fd(pollfds_address: int, nfds: int) -> int | None:
    """The fd of a one-entry pollfd array in this process's memory, or None."""
    if nfds != 1:
        return None
    try:
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            raw = os.pread(mem.fileno(), 4, pollfds_address)
    except OSError:  # gone: the call returned and its stack frame with it
        return None
    return struct.unpack("i", raw)[0] if len(raw) == 4 else None


def blocked_on(tid: int, fd: int) -> bool:
    """True while thread `tid` sits in a read(2), write(2), splice(2) or poll(2) on `fd`.

    /proc/<pid>/task/<tid>/syscall reads "<nr> <arg1> <arg2> <arg3> ..." while the thread is in a
    system call. read and write take the fd first; splice(fd_in, NULL, fd_out, ...) has it first or
    third with a NULL second argument; poll's first argument points at the pollfd, read from our
    own memory. A wait for the GIL (a futex on an address) matches none of them.
    """
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except FileNotFoundError:
        return False  # the thread has ended
    if len(fields) < 4 or fields[0] == "running":
        return False
    args = [int(field, 16) for field in fields[1:4]]
    if int(fields[0]) in POLL_SYSCALLS:
        return polled_fd(args[0], args[1]) == fd
    return args[0] == fd or (args[1] == 0 and args[2] == fd)


def wait_blocked(worker: Worker, fd: int, what: str) -> None:
    """Waits until the worker's thread is blocked on fd; fails at once if the worker ended."""
    tid = worker.thread.native_id
    assert tid is not None
    wait_for(lambda: blocked_on(tid, fd) or not worker.thread.is_alive(), what)
    if not worker.thread.is_alive():
        worker.result()  # raises what the worker raised
        raise AssertionError(f"{worker.name} returned {worker.value!r} before {what}")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = BOUND_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.001)  # a poll interval, not a guess: the condition decides


def set_receive_timeout(sock: socket.socket, seconds: int) -> None:
    # SO_RCVTIMEO keeps the fd blocking; a blocked read or splice fails with EAGAIN when it expires.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, 0))


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
# where a read/write loop is faster (measured: see _splice_c.pyx); the Python twin never splices.
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


# --- Pipes and files: direct splice and the read/write fallback -----------------------------------

# Where the compiled twin splices and where it must fall back (see the next test):
#   socket/file -> socket/file: through its own pipe       src or dst a pipe: one direct splice
#   src procfs (/proc/self/environ): the first splice is refused, read/write from the start
#   dst append (a file opened O_APPEND): the first splice out is refused, after bytes are already
#   in the pipe; they are drained through the buffer first
SOURCES = ["socket", "pipe", "file", "procfs"]
DESTINATIONS = ["socket", "pipe", "file", "append"]


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
        wait_for(lambda: counted[0] > start + 100_000, "the counter thread to advance")
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
        wait_for(lambda: len(handled) == expected, "the signal handler to run")  # noqa: B023
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
        wait_for(lambda: blocked_on(main_tid, src.fileno()), "the pump to block reading src")
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
