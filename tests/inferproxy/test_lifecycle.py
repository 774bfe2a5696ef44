"""Start line, stopping on SIGTERM/SIGINT, and no leaked file descriptors or threads."""

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from boxmaker._fast import NO_EXTENSIONS
from boxmaker.inferproxy.cli import parse_upstream
from boxmaker.inferproxy.proxy import Settings
from tests.support.inferproxy.proxy import (
    START_LINE,
    StartProxy,
    accept,
    address,
    closed_at_once,
    connect,
)
from tests.support.procs import Daemon, open_fds, thread_count, wait_for


def test_start_line_names_listen_upstream_and_the_compiled_splice(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    proxy = start_proxy(sock_path, address(upstream))
    line = proxy.wait_for_line(START_LINE)
    expected = "splice=py (read/write)" if NO_EXTENSIONS else "splice=c (splice+read/write)"
    assert line == f"inferproxy: listening on {sock_path}, upstream {address(upstream)}, {expected}"
    assert proxy.lines == [line]  # one line at start, nothing else until something is refused
    client = connect(sock_path)
    far = accept(upstream)
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert far.recv(100) == b"GET / HTTP/1.1\r\n\r\n"
    client.close()
    far.close()
    assert proxy.stop() == 0
    assert proxy.lines == [line]  # logs nothing about traffic
    assert proxy.err_lines == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_removes_the_socket_closes_connections_and_exits_0(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket, signum: int
) -> None:
    proxy = start_proxy(sock_path, address(upstream))
    client = connect(sock_path)
    far = accept(upstream)
    client.sendall(b"in flight")
    assert far.recv(100) == b"in flight"
    started = time.monotonic()
    proxy.send_signal(signum)
    assert proxy.wait() == 0
    assert time.monotonic() - started < 3.0
    assert not os.path.exists(sock_path)
    assert closed_at_once(client), "the client's connection was left open"
    assert closed_at_once(far), "the upstream connection was left open"
    assert proxy.err_lines == []  # no traceback from KeyboardInterrupt or a copy thread
    client.close()
    far.close()


def test_stop_does_not_wait_for_a_hanging_upstream_connect(
    start_proxy: StartProxy, sock_path: str
) -> None:
    blackhole = socket.create_server(("127.0.0.1", 0), backlog=0)
    filler = socket.create_connection(blackhole.getsockname())  # the one queue place
    fillers = [filler]
    try:
        while True:
            s = socket.socket()
            s.settimeout(0.2)
            fillers.append(s)
            try:
                s.connect(blackhole.getsockname())
            except TimeoutError:
                break
        proxy = start_proxy(sock_path, address(blackhole), "--connect-timeout", "30")
        client = connect(sock_path)
        wait_for(lambda: thread_count(proxy.pid) >= 2, "the connecting thread to start")
        started = time.monotonic()
        assert proxy.stop() == 0
        assert time.monotonic() - started < 3.0
        assert closed_at_once(client)
        client.close()
    finally:
        for s in fillers:
            s.close()
        blackhole.close()


def _one_connection(path: str, upstream: socket.socket, i: int) -> None:
    client = connect(path)
    far = accept(upstream)
    if i % 3 == 0:  # client goes first
        client.close()
        assert far.recv(1) == b""
        far.close()
    elif i % 3 == 1:  # upstream goes first
        far.close()
        assert client.recv(1) == b""
        client.close()
    else:  # a byte each way, then both
        client.sendall(b"q")
        assert far.recv(1) == b"q"
        far.sendall(b"r")
        assert client.recv(1) == b"r"
        client.close()
        far.close()


def test_no_descriptor_or_thread_leaks_after_1000_connections(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    proxy = start_proxy(
        sock_path,
        address(upstream),
        "--accept-burst",
        "100000",
        "--accept-rate",
        "100000",
        "--max-connections",
        "64",
    )
    for i in range(12):  # warm up: imports, thread machinery, the first pipe
        _one_connection(sock_path, upstream, i)
    wait_for(lambda: thread_count(proxy.pid) == 1, "the warm-up connections' threads to end")
    fds, threads = open_fds(proxy.pid), thread_count(proxy.pid)
    for i in range(1000):
        _one_connection(sock_path, upstream, i)
    wait_for(
        lambda: (open_fds(proxy.pid), thread_count(proxy.pid)) == (fds, threads),
        f"the daemon to settle back to {fds} fds and {threads} threads "
        f"(now {open_fds(proxy.pid)} fds, {thread_count(proxy.pid)} threads)",
    )
    assert proxy.lines == [proxy.wait_for_line(START_LINE)]  # nothing refused


def test_console_script_runs_the_same_daemon(short_dir: str, upstream: socket.socket) -> None:
    script = Path(sys.executable).parent / "inferproxy"
    path = os.path.join(short_dir, "cli.sock")
    daemon = Daemon([str(script), "--listen", path, "--upstream", address(upstream)])
    try:
        assert daemon.wait_for_line(START_LINE).startswith(f"{START_LINE} {path}, ")
        assert daemon.stop() == 0
        assert not os.path.exists(path)
    finally:
        daemon.kill()


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("127.0.0.1:11434", ("127.0.0.1", 11434)),
        ("straylight:11434", ("straylight", 11434)),
        ("[::1]:8080", ("::1", 8080)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_upstream_forms(text: str, parsed: tuple[str, int]) -> None:
    assert parse_upstream(text) == parsed
    host, port = parsed
    assert Settings("/x.sock", host, port).upstream == text  # as the start line names it
