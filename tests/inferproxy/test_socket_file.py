"""The socket file: replaced when stale, 0600 in a 0700 folder, and nothing else is ever removed.

A folder that another user could change is refused at start (OpenSSH's StrictModes).
"""

import os
import socket
import stat

import pytest

from boxmaker._cli import ExitStatus
from tests.support.inferproxy.proxy import BOUND, StartProxy, accept, address, connect, run_main
from tests.support.procs import Daemon, python_module


def mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def run_to_exit(listen: str, upstream: str) -> tuple[int, Daemon]:
    daemon = Daemon(
        python_module("boxmaker.inferproxy", "--listen", listen, "--upstream", upstream)
    )
    try:
        return daemon.wait(BOUND), daemon
    finally:
        daemon.kill()


def test_socket_file_is_0600_and_works(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    old_umask = os.umask(0)  # the daemon inherits a umask that would give 0777
    try:
        start_proxy(sock_path, address(upstream))
    finally:
        os.umask(old_umask)
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    assert mode(sock_path) == 0o600
    client = connect(sock_path)
    far = accept(upstream)
    client.sendall(b"a")
    assert far.recv(1) == b"a"
    client.close()
    far.close()


def test_missing_folder_is_created_0700(
    start_proxy: StartProxy, short_dir: str, upstream: socket.socket
) -> None:
    folder = os.path.join(short_dir, "run")
    path = os.path.join(folder, "infer.sock")
    old_umask = os.umask(0o277)  # 0700 whatever the umask, even one that takes the owner's bits
    try:
        start_proxy(path, address(upstream))
    finally:
        os.umask(old_umask)
    assert mode(folder) == 0o700
    assert mode(path) == 0o600


def test_every_level_the_proxy_creates_is_0700(
    start_proxy: StartProxy, short_dir: str, upstream: socket.socket
) -> None:
    levels = [os.path.join(short_dir, *"abc"[: i + 1]) for i in range(3)]
    path = os.path.join(levels[-1], "infer.sock")
    old_umask = os.umask(0o022)  # os.makedirs would leave the upper levels 0755
    try:
        start_proxy(path, address(upstream))
    finally:
        os.umask(old_umask)
    assert [mode(level) for level in levels] == [0o700] * 3
    assert mode(path) == 0o600


@pytest.mark.parametrize("folder_mode", [0o770, 0o707, 0o777, 0o1777])
def test_folder_that_others_can_write_is_refused(short_dir: str, folder_mode: int) -> None:
    folder = os.path.join(short_dir, "run")
    os.mkdir(folder)
    os.chmod(folder, folder_mode)
    path = os.path.join(folder, "infer.sock")
    assert run_main("--listen", path, "--upstream", "127.0.0.1:9") == (
        ExitStatus.USAGE,
        "",
        f"inferproxy: the socket's folder {folder} can be written by other users "
        f"(mode {folder_mode:04o}); refusing to put a socket there (chmod go-w it, or choose "
        "another folder)\n",
    )
    assert os.listdir(folder) == []
    assert mode(folder) == folder_mode  # left as it was


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_folder_another_user_owns_is_refused(short_dir: str) -> None:
    folder = os.path.join(short_dir, "run")
    os.mkdir(folder, 0o700)
    nobody = 65534
    os.chown(folder, nobody, nobody)
    path = os.path.join(folder, "infer.sock")
    assert run_main("--listen", path, "--upstream", "127.0.0.1:9") == (
        ExitStatus.USAGE,
        "",
        f"inferproxy: the socket's folder {folder} is owned by uid {nobody}, not by this user "
        f"(uid {os.geteuid()}) or root; refusing to put a socket there\n",
    )
    assert os.listdir(folder) == []


def test_existing_folder_is_left_as_it_is(
    start_proxy: StartProxy, short_dir: str, upstream: socket.socket
) -> None:
    os.chmod(short_dir, 0o750)
    start_proxy(os.path.join(short_dir, "infer.sock"), address(upstream))
    assert mode(short_dir) == 0o750


def test_stale_socket_file_is_replaced(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock_path)  # a socket file nobody listens on, as a crashed daemon leaves
    dead.close()
    keep = sock_path + ".old"
    os.link(sock_path, keep)  # holds the stale inode, so its number cannot be reused
    stale_inode = os.lstat(sock_path).st_ino
    start_proxy(sock_path, address(upstream))
    assert os.lstat(sock_path).st_ino != stale_inode
    assert os.lstat(keep).st_nlink == 1  # the stale name was unlinked
    client = connect(sock_path)
    far = accept(upstream)
    far.sendall(b"b")
    assert client.recv(1) == b"b"
    client.close()
    far.close()


@pytest.mark.parametrize("kind", ["regular file", "directory", "symbolic link"])
def test_path_that_is_not_a_socket_is_refused_and_left_alone(
    sock_path: str, upstream: socket.socket, kind: str
) -> None:
    if kind == "regular file":
        with open(sock_path, "w") as f:
            f.write("precious\n")
    elif kind == "directory":
        os.mkdir(sock_path)
    else:
        os.symlink("/nonexistent-target", sock_path)
    before = os.lstat(sock_path)
    code, daemon = run_to_exit(sock_path, address(upstream))
    assert code == 2
    assert daemon.lines == []  # no start line
    assert daemon.err_lines == [
        f"inferproxy: {sock_path} exists and is a {kind}, not a socket; "
        "refusing to remove it (move it away or choose another --listen path)"
    ]
    after = os.lstat(sock_path)
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (
        before.st_ino,
        before.st_mode,
        before.st_mtime_ns,
    )
    if kind == "regular file":
        with open(sock_path) as f:
            assert f.read() == "precious\n"


def test_socket_in_use_is_not_taken_over(
    start_proxy: StartProxy, sock_path: str, upstream: socket.socket
) -> None:
    first = start_proxy(sock_path, address(upstream))
    inode = os.lstat(sock_path).st_ino
    code, second = run_to_exit(sock_path, address(upstream))
    assert code == 2
    assert f"another process is listening on {sock_path}" in " ".join(second.err_lines)
    assert os.lstat(sock_path).st_ino == inode
    assert first.proc.poll() is None


@pytest.mark.parametrize(
    ("upstream_arg", "message"),
    [
        ("localhost", "--upstream must be host:port"),
        ("127.0.0.1:0", "port must be a number from 1 to 65535"),
        ("127.0.0.1:http", "port must be a number from 1 to 65535"),
        ("::1:8080", "IPv6 address in brackets"),
    ],
)
def test_bad_upstream_is_a_clear_error(sock_path: str, upstream_arg: str, message: str) -> None:
    code, daemon = run_to_exit(sock_path, upstream_arg)
    assert code == 2
    assert message in " ".join(daemon.err_lines)
    assert not os.path.exists(sock_path)


def test_path_too_long_for_a_unix_socket_is_a_clear_error(short_dir: str) -> None:
    path = os.path.join(short_dir, "s" * 120)
    code, daemon = run_to_exit(path, "127.0.0.1:9")
    assert code == 2
    assert "a Unix socket path may have at most 107" in " ".join(daemon.err_lines)
