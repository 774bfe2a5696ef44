"""SO_PEERCRED: a connection from any uid but ours and root is refused, whatever the file mode.

A real second user: the client runs as `nobody` (setpriv, as root), against a socket chmod 0666
by hand, which is what the file mode alone would let through.
"""

import os
import pwd
import shutil
import socket
import subprocess
import sys

import pytest

from tests.support.inferproxy.proxy import (
    BOUND,
    StartProxy,
    accept,
    address,
    connect,
    upstream_pending,
)

# Connects, sends a request, and prints what became of the connection within the bound.
CLIENT = r"""
import select, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
try:
    s.sendall(b"GET /slots HTTP/1.1\r\n\r\n")
    ready, _, _ = select.select([s], [], [], float(sys.argv[2]))
    print("closed" if ready and s.recv(1) == b"" else "open" if not ready else "answered")
except (BrokenPipeError, ConnectionResetError):
    print("closed")
"""

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="running a client as another user needs root and setpriv",
)


def python_for_nobody() -> str:
    """An interpreter `nobody` may run: the venv's may live under a folder it cannot enter."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def test_another_users_connection_is_refused_even_with_the_socket_0666(
    start_proxy: StartProxy, short_dir: str, upstream: socket.socket
) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chmod(short_dir, 0o755)  # nobody may enter the folder; only we may write to it
    path = os.path.join(short_dir, "infer.sock")
    proxy = start_proxy(path, address(upstream))
    os.chmod(path, 0o666)  # by hand: the file mode no longer keeps anyone out
    child = subprocess.Popen(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            python_for_nobody(),
            "-I",
            "-c",
            CLIENT,
            path,
            str(BOUND),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = child.communicate(timeout=BOUND * 2)
    assert (out, err) == ("closed\n", ""), "nobody's connection was not closed at once"
    assert proxy.wait_for_line("refused a connection") == (
        f"inferproxy: refused a connection: peer uid {nobody} (pid {child.pid}) is neither "
        f"this daemon's user (uid {os.geteuid()}) nor root"
    )
    assert not upstream_pending(upstream, 0.2), "nobody's connection reached the upstream"
    # Our own connections still go through.
    client = connect(path)
    far = accept(upstream)
    client.sendall(b"ours")
    assert far.recv(16) == b"ours"
    client.close()
    far.close()
    assert proxy.count_lines("refused") == 1
