"""What the splice tests share: socket pairs through one or two pumps, payloads, and a look at
what a pump's thread is blocked in (from /proc), for tests/fast/test_splice_*.py.

Sockets given to a pump are never put in timeout mode (that would make their fds non-blocking);
SO_RCVTIMEO is used instead where a pump that holds the GIL must be made to give up.
"""

import contextlib
import hashlib
import os
import random
import socket
import struct
from collections.abc import Callable
from functools import cache

from tests.support.fast.worker import BOUND_S, Worker
from tests.support.procs import wait_for

Pump = Callable[[int, int], int]

KIB = 1024
MIB = 1024 * KIB
POLL_S = 0.001  # how often a bounded wait looks at its condition


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


# A route names the socket kind on the client side of the pump, then ">" and the upstream side
# ("unix>tcp" is inferproxy's). A lone kind is the same on both sides.
ROUTES = ["unix", "tcp", "unix>tcp", "tcp>unix"]


def ends(route: str) -> tuple[str, str]:
    near, _, far = route.partition(">")
    return near, far or near


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
    wait_for(lambda: blocked_on(tid, fd) or not worker.thread.is_alive(), what, BOUND_S, POLL_S)
    if not worker.thread.is_alive():
        worker.result()  # raises what the worker raised
        raise AssertionError(f"{worker.name} returned {worker.value!r} before {what}")


def set_receive_timeout(sock: socket.socket, seconds: int) -> None:
    # SO_RCVTIMEO keeps the fd blocking; a blocked read or splice fails with EAGAIN when it expires.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, 0))
