"""The stream kit (tests/support/inferproxy/check_stream.py) on a bare socketpair and through
inferproxy.

The proxy is transparent if it passes every check the bare pair passes: exact bytes both ways,
many small writes in order, and a half-close in each direction passed on while the other
direction keeps flowing.
"""

import socket
from collections.abc import Callable

import pytest

from tests.support.inferproxy import check_stream
from tests.support.inferproxy.proxy import StartProxy, accept, address, connect

# The kit makes more connections than the default accept burst; limits have their own tests.
HIGH_LIMITS = ("--accept-burst", "1000", "--accept-rate", "1000")
BIG = 64 << 20  # the brief's largest payload, each way at once


def bare_pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair()


@pytest.fixture
def proxied_pair(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> Callable[[], tuple[socket.socket, socket.socket]]:
    start_proxy(sock_path, address(upstream), *HIGH_LIMITS)

    def make() -> tuple[socket.socket, socket.socket]:
        client = connect(sock_path)
        return client, accept(upstream)

    return make


@pytest.fixture(params=["socketpair", "inferproxy"])
def make_pair(
    request: pytest.FixtureRequest,
) -> Callable[[], tuple[socket.socket, socket.socket]]:
    if request.param == "socketpair":
        return bare_pair
    pair: Callable[[], tuple[socket.socket, socket.socket]]
    pair = request.getfixturevalue("proxied_pair")
    return pair


def test_kit(make_pair: check_stream.PairMaker) -> None:
    check_stream.check_all(make_pair)


@pytest.mark.parametrize(
    ("up", "down"),
    [(BIG, BIG), (BIG, 0), (0, BIG), (1, BIG - 1), (65537, 3 << 20)],
    ids=["64MiB-both", "64MiB-up", "64MiB-down", "1B-up-64MiB-down", "odd-sizes"],
)
def test_exact_bytes_through_proxy(
    proxied_pair: check_stream.PairMaker, up: int, down: int
) -> None:
    check_stream.check_exact_bytes(proxied_pair, up, down, seed=up ^ down)


@pytest.mark.parametrize("max_write", [1, 7, 100, 1500])
def test_many_small_writes_through_proxy(
    proxied_pair: check_stream.PairMaker, max_write: int
) -> None:
    check_stream.check_small_writes(proxied_pair, count=3000, max_write=max_write, seed=max_write)


@pytest.mark.parametrize("size", [1, 4096, 8 << 20])
def test_half_close_each_way_through_proxy(proxied_pair: check_stream.PairMaker, size: int) -> None:
    check_stream.check_half_close_from_client(proxied_pair, size=size, seed=size)
    check_stream.check_half_close_from_far(proxied_pair, size=size, seed=size + 1)


def test_kit_can_fail() -> None:
    """The kit notices a stream that loses a byte (so its passes above mean something)."""

    def lossy_pair() -> tuple[socket.socket, socket.socket]:
        a, b = socket.socketpair()
        a.sendall(b"?")  # an extra byte the far side never sent
        return b, a

    with pytest.raises(AssertionError, match="far -> client"):
        check_stream.check_exact_bytes(lossy_pair, 10, 10)
