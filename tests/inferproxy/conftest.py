"""Fixtures for the inferproxy tests: a real daemon as a subprocess, a TCP upstream in the test (the
helpers the tests call are in tests/support/inferproxy/proxy.py)."""

import os
import shutil
import socket
from collections.abc import Iterator

import pytest

from tests.support.inferproxy.proxy import BOUND, StartProxy, start_inferproxy
from tests.support.procs import Daemon, python_module, short_tmpdir


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A folder with a short path: a Unix socket path may have at most 107 bytes."""
    path = str(short_tmpdir("ip-"))
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


@pytest.fixture
def start_proxy() -> Iterator[StartProxy]:
    """Starts `python -m boxmaker.inferproxy` with the given flags and waits for its start line."""
    daemons: list[Daemon] = []

    def start(listen: str, upstream: str, *flags: str, wait: bool = True) -> Daemon:
        if wait:
            daemon = start_inferproxy(listen, upstream, *flags)
        else:
            argv = ("--listen", listen, "--upstream", upstream, *flags)
            daemon = Daemon(python_module("boxmaker.inferproxy", *argv))
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.kill()
