"""An upstream that cannot be reached, or dies mid-stream, closes the client's connection."""

import socket
import struct
import time

import pytest

from tests.support.inferproxy.proxy import (
    BOUND,
    StartProxy,
    accept,
    address,
    closed_at_once,
    closed_port,
    connect,
)


def test_refused_upstream_closes_the_client_at_once(
    start_proxy: StartProxy, sock_path: str
) -> None:
    start_proxy(sock_path, f"127.0.0.1:{closed_port()}")
    client = connect(sock_path)
    started = time.monotonic()
    assert closed_at_once(client), "the client stayed open with no upstream"
    assert time.monotonic() - started < 1.0
    client.close()


def test_upstream_that_never_answers_closes_the_client_after_the_connect_timeout(
    start_proxy: StartProxy, sock_path: str
) -> None:
    # A listener whose accept queue is full: Linux drops further SYNs, so a connect just hangs.
    blackhole = socket.create_server(("127.0.0.1", 0), backlog=0)
    fillers = []
    try:
        while True:  # fill the queue until a connect no longer completes
            filler = socket.socket()
            filler.settimeout(0.2)
            fillers.append(filler)
            try:
                filler.connect(blackhole.getsockname())
            except TimeoutError:
                break
            assert len(fillers) < 10, "could not fill the listener's accept queue"
        start_proxy(sock_path, address(blackhole), "--connect-timeout", "0.3")
        client = connect(sock_path)
        started = time.monotonic()
        assert closed_at_once(client, BOUND)
        waited = time.monotonic() - started
        assert 0.2 < waited < 3.0, f"closed after {waited:.2f} s, expected about the 0.3 s timeout"
        client.close()
    finally:
        for filler in fillers:
            filler.close()
        blackhole.close()


def _stream_some(client: socket.socket, far: socket.socket) -> None:
    far.sendall(b"x" * 100_000)
    got = 0
    while got < 100_000:
        got += len(client.recv(65536))
    client.sendall(b"y" * 1000)
    assert len(far.recv(1000)) > 0


def _send_until_refused(client: socket.socket) -> None:
    """Keeps sending for up to BOUND seconds; raises once the proxy has closed its end."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        client.sendall(b"z" * 1024)
        time.sleep(0.01)


def _rst_close(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_upstream_reset_mid_stream_closes_the_client(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    start_proxy(sock_path, address(upstream))
    client = connect(sock_path)
    far = accept(upstream)
    _stream_some(client, far)
    _rst_close(far)  # an RST, as when llama-server is killed
    assert closed_at_once(client)
    # Closed for good, not half-closed: the client can no longer send either.
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        _send_until_refused(client)
    client.close()


def test_upstream_closing_mid_stream_closes_the_client(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    start_proxy(sock_path, address(upstream))
    client = connect(sock_path)
    far = accept(upstream)
    _stream_some(client, far)
    far.close()  # a FIN: passed on as EOF
    assert closed_at_once(client)
    # The client's next bytes hit a closed upstream: the proxy then closes the client entirely.
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        _send_until_refused(client)
    client.close()
