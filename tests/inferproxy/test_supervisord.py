"""conf/supervisord.conf runs inferproxy: supervisorctl start, stop and status work.

A real supervisord in the foreground, on the repository's own config file, with BOXMAKER_RUN
pointing into a temporary folder; shut down at the end.
"""

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.inferproxy.proxy import BOUND, START_LINE, accept, address, connect
from tests.support.procs import Daemon, wait_for, wait_for_socket

CONF = Path(__file__).resolve().parents[2] / "conf" / "supervisord.conf"
BIN = Path(sys.executable).parent


@pytest.fixture
def run_env(short_dir: str, upstream: socket.socket) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        BOXMAKER_RUN=short_dir,
        BOXMAKER_PYTHON=sys.executable,
        BOXMAKER_UPSTREAM=address(upstream),
        # loopd is in the same file; with no config it exits at once and supervisord gives up on
        # it (FATAL), which leaves inferproxy alone. tests/e2e runs the whole stack.
        BOXMAKER_LOOPD_CONFIG=os.path.join(short_dir, "no-loopd.toml"),
    )
    return env


def ctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "supervisorctl"), "-c", str(CONF), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND * 2,
        check=False,
    )


def status(env: dict[str, str]) -> str:
    return ctl(env, "status", "inferproxy").stdout


@pytest.fixture
def supervisord(run_env: dict[str, str]) -> Iterator[Daemon]:
    daemon = Daemon([str(BIN / "supervisord"), "-n", "-c", str(CONF)], env=run_env)
    try:
        wait_for_socket(os.path.join(run_env["BOXMAKER_RUN"], "supervisor.sock"))
        yield daemon
    finally:
        ctl(run_env, "shutdown")
        try:
            daemon.wait(BOUND)
        finally:
            daemon.kill()


def test_supervisorctl_status_stop_start(
    supervisord: Daemon, run_env: dict[str, str], upstream: socket.socket
) -> None:
    run = run_env["BOXMAKER_RUN"]
    sock = os.path.join(run, "infer.sock")
    log = os.path.join(run, "inferproxy.log")

    # autostart: RUNNING once startsecs has passed.
    wait_for(lambda: "RUNNING" in status(run_env), "inferproxy to be RUNNING", timeout=BOUND)
    wait_for_socket(sock)
    with open(log) as f:
        assert START_LINE in f.read()

    client = connect(sock)
    far = accept(upstream)
    client.sendall(b"via supervisord")
    assert far.recv(100) == b"via supervisord"
    client.close()
    far.close()

    stopped = ctl(run_env, "stop", "inferproxy")
    assert stopped.returncode == 0, stopped
    assert "inferproxy: stopped" in stopped.stdout
    assert "STOPPED" in status(run_env)
    assert not os.path.exists(sock)  # SIGTERM removed the socket file...
    with open(os.path.join(run, "supervisord.log")) as f:
        assert "stopped: inferproxy (exit status 0)" in f.read()  # ...and it exited 0

    started = ctl(run_env, "start", "inferproxy")
    assert started.returncode == 0, started
    assert "inferproxy: started" in started.stdout
    assert "RUNNING" in status(run_env)
    wait_for_socket(sock)
    client = connect(sock)
    far = accept(upstream)
    far.sendall(b"back")
    assert client.recv(100) == b"back"
    client.close()
    far.close()
    with open(os.path.join(run, "inferproxy.err.log")) as f:
        assert f.read() == ""
