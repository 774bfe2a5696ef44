"""Fixtures for the inferproxy tests: a real daemon as a subprocess, a TCP upstream in the test."""

import io
import os
import select
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator

import pytest

from boxmaker._cli import Environment, ExitStatus
from boxmaker.inferproxy.cli import main
from tests.support.procs import Daemon, python_module, wait_for_socket

BOUND = 10.0  # seconds for anything that should take milliseconds
START_LINE = "inferproxy: listening on"

StartProxy = Callable[..., Daemon]


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A folder with a short path: a Unix socket path may have at most 107 bytes."""
    path = tempfile.mkdtemp(prefix="ip-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sock_path(short_dir: str) -> str:
    return os.path.join(short_dir, "infer.sock")


@pytest.fixture
def upstream() -> Iterator[socket.socket]:
    """A listening TCP socket on 127.0.0.1 standing in for llama-server; accept() is bounded."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    listener.settimeout(BOUND)
    try:
        yield listener
    finally:
        listener.close()


def address(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    return f"{host}:{port}"


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def start_proxy() -> Iterator[StartProxy]:
    """Starts `python -m boxmaker.inferproxy` with the given flags and waits for its start line."""
    daemons: list[Daemon] = []

    def start(listen: str, upstream: str, *flags: str, wait: bool = True) -> Daemon:
        daemon = Daemon(
            python_module("boxmaker.inferproxy", "--listen", listen, "--upstream", upstream, *flags)
        )
        daemons.append(daemon)
        if wait:
            daemon.wait_for_line(START_LINE, BOUND)
            wait_for_socket(listen, BOUND)
        return daemon

    yield start
    for daemon in daemons:
        daemon.kill()


def connect(path: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(BOUND)
    client.connect(path)
    return client


def accept(listener: socket.socket) -> socket.socket:
    far, _ = listener.accept()
    far.settimeout(BOUND)
    return far


def closed_at_once(sock: socket.socket, bound: float = BOUND) -> bool:
    """True when the peer closed `sock` within `bound`: EOF or a reset, with no byte first."""
    ready, _, _ = select.select([sock], [], [], bound)
    if not ready:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def upstream_pending(listener: socket.socket, within: float) -> bool:
    """True if a connection reaches the upstream listener within `within` seconds."""
    ready, _, _ = select.select([listener], [], [], within)
    return bool(ready)


def run_main(*argv: str) -> tuple[ExitStatus, str, str]:
    """`main(argv, env)` in this process: its status, stdout and stderr.

    Only for arguments that stop it before it serves. Should it serve after all (the refusal
    under test is broken), a SIGTERM after BOUND stops it, and the test fails on the OK status
    and the start line instead of hanging.
    """
    out, err = io.StringIO(), io.StringIO()
    lock = threading.Lock()
    returned = False

    def stop_if_serving() -> None:
        with lock:
            if not returned:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)

    timer = threading.Timer(BOUND, stop_if_serving)
    timer.start()
    try:
        status = main(list(argv), Environment(stdin=io.StringIO(), stdout=out, stderr=err))
    finally:
        with lock:
            returned = True
        timer.cancel()
    return status, out.getvalue(), err.getvalue()
