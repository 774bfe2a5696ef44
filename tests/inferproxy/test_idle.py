"""Idle clients lose their connection: no first byte in time, or no byte either way for too long.

The timeouts are set small through the flags; every wait is bounded, and the only timed
assertions are the two limits themselves (not before the timeout, and within the bound after).
"""

import select
import socket
import time

import pytest

from tests.support.inferproxy.proxy import (
    BOUND,
    StartProxy,
    accept,
    address,
    closed_at_once,
    connect,
)
from tests.support.procs import Daemon, thread_count, wait_for

FIRST_BYTE = 0.3
IDLE = 1.0
SLACK = 0.05  # the kernel counts quiet time in jiffies (4 ms at HZ=250): a little early is fine


def first_byte_line(seconds: float) -> str:
    return (
        f"inferproxy: closed an idle connection: no byte from the client in {seconds:g} s "
        f"(--first-byte-timeout {seconds:g})"
    )


def idle_line(seconds: float) -> str:
    return (
        f"inferproxy: closed an idle connection: no byte either way in {seconds:g} s "
        f"(--idle-timeout {seconds:g})"
    )


def start(start_proxy: StartProxy, path: str, upstream: socket.socket, *flags: str) -> Daemon:
    timeouts = ("--first-byte-timeout", f"{FIRST_BYTE:g}", "--idle-timeout", f"{IDLE:g}")
    return start_proxy(path, address(upstream), *timeouts, *flags)


def still_open(sock: socket.socket, for_seconds: float) -> bool:
    """True when nothing (no byte, no EOF) arrives on `sock` for `for_seconds`."""
    ready, _, _ = select.select([sock], [], [], for_seconds)
    return not ready


def test_client_that_sends_nothing_is_closed_after_the_first_byte_timeout(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    proxy = start(start_proxy, sock_path, upstream)
    client = connect(sock_path)
    connected = time.monotonic()
    far = accept(upstream)
    assert closed_at_once(client), "the silent client was not closed"
    waited = time.monotonic() - connected
    assert FIRST_BYTE - SLACK <= waited < FIRST_BYTE + 3.0, f"closed after {waited:.2f} s"
    assert closed_at_once(far), "its upstream connection was left open"
    assert proxy.wait_for_line("closed an idle connection") == first_byte_line(FIRST_BYTE)
    client.close()
    far.close()


def test_eight_silent_clients_do_not_keep_the_ninth_out(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    """The attack: eight connections that say nothing took every slot for ever."""
    proxy = start(start_proxy, sock_path, upstream)  # the default cap: 8 connections
    silent = [connect(sock_path) for _ in range(8)]
    fars = [accept(upstream) for _ in silent]
    for client in silent:
        assert closed_at_once(client)
    wait_for(lambda: proxy.count_lines("closed an idle connection") == 8, "8 idle lines")
    wait_for(lambda: thread_count(proxy.pid) == 1, "the silent clients' threads to end")
    ninth = connect(sock_path)
    far = accept(upstream)
    ninth.sendall(b"ninth")
    assert far.recv(16) == b"ninth"
    assert proxy.count_lines("refused") == 0
    for sock in [*silent, *fars, ninth, far]:
        sock.close()


def test_first_byte_timeout_does_not_apply_after_the_first_byte(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    proxy = start(start_proxy, sock_path, upstream)
    client = connect(sock_path)
    far = accept(upstream)
    client.sendall(b"a")
    assert far.recv(1) == b"a"
    far.sendall(b"b")
    assert client.recv(1) == b"b"
    assert still_open(client, FIRST_BYTE * 2), "closed by the first-byte timeout after a byte"
    client.sendall(b"c")
    assert far.recv(1) == b"c"
    assert proxy.count_lines("closed") == 0
    client.close()
    far.close()


def test_connection_quiet_both_ways_is_closed_after_the_idle_timeout(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    proxy = start(start_proxy, sock_path, upstream)
    client = connect(sock_path)
    far = accept(upstream)
    client.sendall(b"q")
    assert far.recv(1) == b"q"
    far.sendall(b"r")
    assert client.recv(1) == b"r"
    last_byte = time.monotonic()
    assert closed_at_once(client), "the idle connection was not closed"
    waited = time.monotonic() - last_byte
    assert IDLE - SLACK <= waited < IDLE + 3.0, f"closed after {waited:.2f} s of quiet"
    assert closed_at_once(far)
    wait_for(lambda: thread_count(proxy.pid) == 1, "the connection's threads to end")
    assert [line for line in proxy.lines if "closed" in line] == [idle_line(IDLE)]  # just one
    client.close()
    far.close()


@pytest.mark.parametrize("direction", ["upstream to client", "client to upstream"])
def test_bytes_one_way_keep_the_connection_open(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket, direction: str
) -> None:
    """A long answer streams while the client says nothing, and the other way round."""
    proxy = start(start_proxy, sock_path, upstream)
    client = connect(sock_path)
    far = accept(upstream)
    client.sendall(b"request")
    assert far.recv(16) == b"request"
    sender, receiver = (far, client) if direction == "upstream to client" else (client, far)
    started = time.monotonic()
    while time.monotonic() - started < IDLE * 2.5:
        sender.sendall(b".")
        assert receiver.recv(1) == b".", "the connection closed while bytes were moving"
        time.sleep(IDLE / 10)  # the pace of the stream under test, not a wait for a condition
    assert proxy.count_lines("closed") == 0
    assert closed_at_once(client), "not closed once quiet"  # and the timeout still works after
    assert proxy.wait_for_line("closed an idle connection") == idle_line(IDLE)
    client.close()
    far.close()


def test_many_connections_each_closed_at_its_own_deadline(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    """The idle check is scheduled for the earliest deadline, whatever order they come in."""
    proxy = start(start_proxy, sock_path, upstream)
    pairs = []
    for _ in range(4):
        client = connect(sock_path)
        far = accept(upstream)
        client.sendall(b"x")
        assert far.recv(1) == b"x"
        pairs.append((client, far, time.monotonic()))
        time.sleep(IDLE / 5)  # staggers the deadlines
    for client, far, last_byte in pairs:
        assert closed_at_once(client, BOUND)
        waited = time.monotonic() - last_byte
        assert IDLE - SLACK <= waited < IDLE + 3.0, f"closed after {waited:.2f} s of quiet"
        client.close()
        far.close()
    # the proxy logs each close as it makes it: the last line may follow the client's EOF
    wait_for(lambda: proxy.count_lines("closed an idle connection") == 4, "4 idle lines", BOUND)
