"""The limits in the real daemon: 8 connections at a time, and the token bucket on accept."""

import select
import socket
import time

from tests.support.inferproxy.proxy import (
    BOUND,
    StartProxy,
    accept,
    address,
    closed_at_once,
    connect,
    upstream_pending,
)
from tests.support.procs import Daemon, thread_count, wait_for


def open_proxied(path: str, upstream: socket.socket) -> tuple[socket.socket, socket.socket]:
    """A client through the proxy and the upstream's end of it (so it was admitted)."""
    client = connect(path)
    return client, accept(upstream)


def assert_passes_bytes(client: socket.socket, far: socket.socket) -> None:
    client.sendall(b"ping")
    assert far.recv(16) == b"ping"
    far.sendall(b"pong")
    assert client.recv(16) == b"pong"


def test_ninth_connection_is_closed_at_once_while_eight_are_open(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    proxy = start_proxy(sock_path, address(upstream))  # the brief's defaults: 8, burst 10
    base_threads = thread_count(proxy.pid)
    held = [open_proxied(sock_path, upstream) for _ in range(8)]
    try:
        ninth = connect(sock_path)
        assert closed_at_once(ninth), "the 9th connection was not closed"
        assert not upstream_pending(upstream, 0.2), "the 9th connection reached the upstream"
        ninth.close()
        line = proxy.wait_for_line("refused a connection")
        assert "connection limit (8 open)" in line
        # The eight are unharmed...
        for client, far in held:
            assert_passes_bytes(client, far)
        # ...and when one ends, its slot is free again (two copy threads per connection).
        client, far = held.pop()
        client.close()
        far.close()
        wait_for(
            lambda: thread_count(proxy.pid) == base_threads + 2 * 7,
            "one connection's threads to end",
        )
        held.append(open_proxied(sock_path, upstream))
        assert_passes_bytes(*held[-1])
        assert proxy.count_lines("refused") == 1
    finally:
        for client, far in held:
            client.close()
            far.close()


def attempt(path: str, upstream: socket.socket) -> bool:
    """One connection: True if admitted (it reached the upstream), False if closed at once."""
    client = connect(path)
    try:
        ready, _, _ = select.select([upstream, client], [], [], BOUND)
        if upstream in ready:
            accept(upstream).close()
            return True
        assert client in ready, f"no outcome for a connection within {BOUND} s"
        assert closed_at_once(client, 0), "the proxy sent bytes to a client it refused"
        return False
    finally:
        client.close()


def test_accept_bucket_refuses_past_the_burst_and_refills(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    rate = 20.0  # one token each 50 ms
    proxy: Daemon = start_proxy(
        sock_path,
        address(upstream),
        "--accept-burst",
        "3",
        "--accept-rate",
        str(rate),
        "--max-connections",
        "100",
    )
    started = time.monotonic()
    outcomes = [attempt(sock_path, upstream) for _ in range(8)]
    burst_end = time.monotonic()
    elapsed = burst_end - started
    admitted = sum(outcomes)
    # The burst, plus whatever refilled while the attempts ran (a loaded machine is slow).
    assert outcomes[:3] == [True, True, True]
    assert admitted <= 3 + rate * elapsed + 1
    assert not all(outcomes), f"8 connections in {elapsed:.3f} s all got through a burst of 3"
    assert "accept rate limit (burst 3, refill 20/s)" in proxy.wait_for_line("refused a connection")

    # Admits again at the refill rate: an attempt every 5 ms for 0.4 s (some 60 attempts) gets
    # about 8 through; never more than what refilled since the burst ran out, plus one.
    started = time.monotonic()
    window = []
    while time.monotonic() - started < 0.4:
        window.append(attempt(sock_path, upstream))
        time.sleep(0.005)
    since_burst = time.monotonic() - burst_end
    assert 2 <= sum(window) <= rate * since_burst + 1, (sum(window), len(window), since_burst)
    # One line per refused connection (printed just after the close, so wait for the last).
    refused = len(outcomes) - admitted + window.count(False)
    wait_for(lambda: proxy.count_lines("accept rate limit") == refused, f"{refused} refusal lines")
