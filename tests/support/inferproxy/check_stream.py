"""A conformance kit for byte streams (after trio's `check_half_closeable_stream`).

Each check takes a *pair maker*: a function returning two connected stream sockets, the client
side and the far side. Run the kit on a bare `socketpair()` and on a path through a proxy: if the
proxy passes every check the bare pair passes, it is transparent for bytes, order and half-close.

Every socket gets a timeout, so a stream that loses bytes or an EOF fails the check instead of
hanging it. The kit closes the sockets it was given.
"""

import random
import socket
import threading
from collections.abc import Callable

PairMaker = Callable[[], tuple[socket.socket, socket.socket]]

TIMEOUT = 20.0  # seconds of silence before a check gives up; 64 MiB needs well under a second
RECV_CHUNK = 256 * 1024


def payload(size: int, seed: int) -> bytes:
    """Random bytes, reproducible from `seed`."""
    return random.Random(seed).randbytes(size)


def _describe_difference(got: bytes | bytearray, want: bytes) -> str:
    if len(got) != len(want):
        prefix = f"{len(got)} bytes instead of {len(want)}"
    else:
        prefix = "the same length"
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"{prefix}; first difference at offset {i}: {g:#04x} instead of {w:#04x}"
    return f"{prefix}; one is a prefix of the other"


def assert_same_bytes(got: bytes | bytearray, want: bytes, what: str) -> None:
    if got != want:
        raise AssertionError(f"{what}: received {_describe_difference(got, want)}")


def recv_exactly(sock: socket.socket, size: int, what: str) -> bytes:
    """Exactly `size` bytes; fails on an early EOF."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], min(RECV_CHUNK, size - got))
        if n == 0:
            raise AssertionError(f"{what}: EOF after {got} of {size} bytes")
        got += n
    return bytes(buf)


def recv_until_eof(sock: socket.socket, limit: int, what: str) -> bytes:
    """Everything up to EOF; fails if more than `limit` bytes arrive."""
    buf = bytearray()
    while True:
        chunk = sock.recv(RECV_CHUNK)
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > limit:
            raise AssertionError(f"{what}: more than the {limit} bytes sent arrived")


def assert_eof(sock: socket.socket, what: str) -> None:
    extra = sock.recv(1)
    if extra:
        raise AssertionError(f"{what}: expected EOF, got a byte {extra!r}")


def run_concurrently(*jobs: Callable[[], None], timeout: float = TIMEOUT * 2) -> None:
    """Runs each job on its own thread; re-raises the first failure, fails on a hang."""
    errors: list[BaseException] = []

    def wrap(job: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                job()
            except BaseException as exc:  # reported to the caller below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(job), daemon=True) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        if t.is_alive():
            raise AssertionError(f"a stream job was still running after {timeout:g} s")
    if errors:
        raise errors[0]


def _pair(make_pair: PairMaker) -> tuple[socket.socket, socket.socket]:
    client, far = make_pair()
    client.settimeout(TIMEOUT)
    far.settimeout(TIMEOUT)
    return client, far


def _send_then_shut(sock: socket.socket, data: bytes) -> Callable[[], None]:
    def job() -> None:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)

    return job


def check_exact_bytes(make_pair: PairMaker, up_size: int, down_size: int, seed: int = 1) -> None:
    """Random payloads both ways at once, each ended by a half-close, arrive exactly."""
    up, down = payload(up_size, seed), payload(down_size, seed + 1)
    client, far = _pair(make_pair)
    got: dict[str, bytes] = {}
    try:

        def recv_far() -> None:
            got["up"] = recv_until_eof(far, up_size, "client -> far")

        def recv_client() -> None:
            got["down"] = recv_until_eof(client, down_size, "far -> client")

        run_concurrently(
            _send_then_shut(client, up), _send_then_shut(far, down), recv_far, recv_client
        )
        assert_same_bytes(got["up"], up, f"client -> far, {up_size} bytes")
        assert_same_bytes(got["down"], down, f"far -> client, {down_size} bytes")
    finally:
        client.close()
        far.close()


def check_small_writes(
    make_pair: PairMaker, count: int = 2000, max_write: int = 64, seed: int = 2
) -> None:
    """Many small writes each way, interleaved, arrive in order and complete."""
    rng = random.Random(seed)

    def pieces() -> list[bytes]:
        return [rng.randbytes(rng.randint(1, max_write)) for _ in range(count)]

    up, down = pieces(), pieces()
    up_all, down_all = b"".join(up), b"".join(down)
    client, far = _pair(make_pair)
    got: dict[str, bytes] = {}
    try:

        def writer(sock: socket.socket, parts: list[bytes]) -> Callable[[], None]:
            def job() -> None:
                for part in parts:
                    sock.sendall(part)

            return job

        def recv_far() -> None:
            got["up"] = recv_exactly(far, len(up_all), "small writes client -> far")

        def recv_client() -> None:
            got["down"] = recv_exactly(client, len(down_all), "small writes far -> client")

        run_concurrently(writer(client, up), writer(far, down), recv_far, recv_client)
        assert_same_bytes(got["up"], up_all, f"{count} small writes client -> far")
        assert_same_bytes(got["down"], down_all, f"{count} small writes far -> client")
        # Nothing more than was written, then EOF each way.
        client.shutdown(socket.SHUT_WR)
        assert_eof(far, "far side after the client's half-close")
        far.shutdown(socket.SHUT_WR)
        assert_eof(client, "client side after the far side's half-close")
    finally:
        client.close()
        far.close()


def _check_half_close(
    closer: socket.socket, other: socket.socket, size: int, seed: int, name: str
) -> None:
    """`closer` half-closes; `other` sees its bytes then EOF, and can still send to `closer`."""
    before, last, after = (
        payload(size, seed),
        payload(size // 2 + 1, seed + 1),
        payload(size, seed + 2),
    )
    # The other direction is flowing before the half-close...
    run_concurrently(
        lambda: other.sendall(before), lambda: _expect(closer, before, f"{name}: before")
    )
    # ...the half-close arrives after the closer's last bytes...
    run_concurrently(
        _send_then_shut(closer, last), lambda: _expect_then_eof(other, last, f"{name}: last")
    )
    # ...and the other direction keeps flowing after it, until its own EOF.
    run_concurrently(
        _send_then_shut(other, after), lambda: _expect_then_eof(closer, after, f"{name}: after")
    )


def _expect(sock: socket.socket, want: bytes, what: str) -> None:
    assert_same_bytes(recv_exactly(sock, len(want), what), want, what)


def _expect_then_eof(sock: socket.socket, want: bytes, what: str) -> None:
    assert_same_bytes(recv_until_eof(sock, len(want), what), want, what)


def check_half_close_from_client(make_pair: PairMaker, size: int = 1 << 20, seed: int = 3) -> None:
    client, far = _pair(make_pair)
    try:
        _check_half_close(client, far, size, seed, "client half-closes")
    finally:
        client.close()
        far.close()


def check_half_close_from_far(make_pair: PairMaker, size: int = 1 << 20, seed: int = 4) -> None:
    client, far = _pair(make_pair)
    try:
        _check_half_close(far, client, size, seed, "far side half-closes")
    finally:
        client.close()
        far.close()


def check_all(make_pair: PairMaker, big: int = 8 << 20) -> None:
    """The whole kit with moderate sizes: what 'transparent' means for one stream."""
    check_exact_bytes(make_pair, 0, 0)
    check_exact_bytes(make_pair, 1, 0)
    check_exact_bytes(make_pair, 0, 1)
    check_exact_bytes(make_pair, big, big // 2 + 7)
    check_small_writes(make_pair)
    check_half_close_from_client(make_pair)
    check_half_close_from_far(make_pair)
