"""The daemon shell's API as `loopd serve` will call it, in-process on real sockets and signals.

inferproxy's tests (tests/inferproxy) run the same code in a real daemon; these pin the pieces.
"""

import io
import os
import select
import signal
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator

import pytest

from boxmaker._daemon import MAX_UNIX_SOCKET_PATH_BYTES, SetupError
from boxmaker._daemon.accept import accept_until_stopped
from boxmaker._daemon.folder import check_socket_folder
from boxmaker._daemon.listener import bind_unix_listener
from boxmaker._daemon.log import DaemonLog
from boxmaker._daemon.peer import PeerCredentials, peer_credentials, peer_refusal
from boxmaker._daemon.signals import stop_signals

BOUND = 10.0


@pytest.fixture
def folder() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="dm-", dir="/tmp") as path:
        yield path


def test_peer_credentials_are_the_connecting_process() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert peer_credentials(a) == PeerCredentials(os.getpid(), os.geteuid(), os.getegid())
        assert peer_refusal(a) is None


def test_stop_signal_wakes_the_pipe_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        ready, _, _ = select.select([stop.read_fd], [], [], BOUND)
        assert ready == [stop.read_fd]
        stop.drain()
        assert (stop.stopping, stop.signum) == (True, signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


def test_listener_is_0600_and_close_leaves_a_successors_file(folder: str) -> None:
    path = os.path.join(folder, "loop.sock")
    listener = bind_unix_listener(path, setting="[channel] socket")
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    os.unlink(path)
    successor = bind_unix_listener(path)  # a new daemon took the path over meanwhile
    listener.close()
    assert os.lstat(path).st_ino == successor.inode
    successor.close()
    assert not os.path.exists(path)


def test_listener_names_the_setting_in_its_messages(folder: str) -> None:
    path = os.path.join(folder, "x" * MAX_UNIX_SOCKET_PATH_BYTES)
    with pytest.raises(SetupError, match=r"^\[channel\] socket path is \d+ bytes"):
        bind_unix_listener(path, setting="[channel] socket")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_folder_may_be_owned_by_the_daemons_user_or_root(folder: str) -> None:
    os.chown(folder, 4321, 4321)
    check_socket_folder(folder, own_uid=4321)
    with pytest.raises(SetupError, match="is owned by uid 4321, not by this user"):
        check_socket_folder(folder, own_uid=1234)
    os.chown(folder, 0, 0)
    check_socket_folder(folder, own_uid=1234)


def test_accept_loop_hands_over_clients_and_calls_the_timer_until_stopped(folder: str) -> None:
    listener = bind_unix_listener(os.path.join(folder, "a.sock"))
    out = io.StringIO()
    log = DaemonLog("test", out, out)
    accepted: list[socket.socket] = []
    timer_calls = 0

    def on_timer() -> float:
        nonlocal timer_calls
        timer_calls += 1
        return 0.01

    def on_client(sock: socket.socket) -> None:
        accepted.append(sock)
        os.kill(os.getpid(), signal.SIGTERM)  # one client is enough: stop

    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(listener.path)
    with stop_signals() as stop:
        bound = threading.Timer(BOUND, stop.on_signal, args=(signal.SIGHUP, None))
        bound.start()  # should the client never be handed over, the loop still ends
        try:
            accept_until_stopped(listener.sock, stop, on_client, log, on_timer=on_timer)
        finally:
            bound.cancel()
        assert stop.signum == signal.SIGTERM
    assert len(accepted) == 1
    assert timer_calls >= 1
    assert out.getvalue() == ""  # our own uid: no refusal line
    for sock in [*accepted, client]:
        sock.close()
    listener.close()
