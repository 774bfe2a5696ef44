"""The inferproxy rig: helpers of the inferproxy tests around a real daemon as a subprocess and a
TCP upstream in the test (the fixtures are in tests/inferproxy/conftest.py)."""

import io
import select
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from boxmaker._cli import Environment, ExitStatus
from boxmaker.inferproxy.cli import main
from tests.support.procs import Daemon, python_module, wait_for_socket

BOUND = 10.0  # seconds for anything that should take milliseconds
START_LINE = "inferproxy: listening on"

StartProxy = Callable[..., Daemon]


def start_inferproxy(
    listen: Path | str, upstream: str, *flags: str, bound: float = BOUND
) -> Daemon:
    """`python -m boxmaker.inferproxy` as a real daemon, returned once its start line is out and
    its socket accepts (killed if either does not come within `bound`). The one proxy launcher of
    the tests: tests/inferproxy, the stack rig, the load and hostile rigs."""
    argv = ("--listen", str(listen), "--upstream", upstream, *flags)
    daemon = Daemon(python_module("boxmaker.inferproxy", *argv))
    try:
        daemon.wait_for_line(START_LINE, bound)
        wait_for_socket(str(listen), bound)
    except BaseException:
        daemon.kill()
        raise
    return daemon


def address(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    return f"{host}:{port}"


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
