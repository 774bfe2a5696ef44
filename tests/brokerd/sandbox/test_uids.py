"""The two sockets' peers, with real second uids (setpriv, as the loopd hardening tests do):
broker.sock serves only loopd's uid, owner.sock only the owner's; root gets no exception, so
loopd cannot approve, and the owner's uid cannot make tool calls in loopd's place."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

import pytest

from tests.support.brokerd.rig import BOUND_S, Rig

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="running a client as another user needs root and setpriv",
)

# A client with no boxmaker import (the other user cannot read the venv): one frame out, the
# first frame's kind back, or "closed", or the connect error.
CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[2]))
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect failed:", e.strerror); sys.exit()
body = json.dumps({"kind": sys.argv[3], "final": True, "body": {}}, separators=(",", ":")).encode()
try:
    s.sendall(len(body).to_bytes(4, "big") + body)
    head = s.recv(4)
    if not head:
        print("closed"); sys.exit()
    data = b""
    while len(data) < int.from_bytes(head, "big"):
        data += s.recv(65536)
    print("answered", json.loads(data)["kind"])
except (BrokenPipeError, ConnectionResetError):
    print("closed")
"""

NOBODY = pwd.getpwnam("nobody").pw_uid
OTHER_UID = 54321  # a uid with no account: a second user


def as_user(uid: int, path: str, kind: str) -> str:
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    child = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-I", "-c",
         CLIENT, path, str(BOUND_S), kind],
        capture_output=True, text=True, timeout=BOUND_S * 2,
    )  # fmt: skip
    assert child.stderr == ""
    return child.stdout.strip()


def start(rig: Rig) -> None:
    rig.broker = {"loopd_uid": NOBODY, "owner_uid": 0}
    rig.start()


def test_loopds_uid_reaches_broker_sock_and_the_owner_does_not(rig: Rig) -> None:
    start(rig)
    st = os.stat(rig.socket)
    assert (st.st_uid, st.st_mode & 0o777) == (NOBODY, 0o600)  # given to loopd's uid, still 0600
    assert as_user(NOBODY, rig.socket, "list") == "answered tools"
    with pytest.raises((ConnectionResetError, BrokenPipeError, AssertionError)):
        rig.call("read_file", {"path": "x"})  # root, the owner here, is not loopd
    assert rig.daemon is not None
    line = rig.daemon.wait_for_line("refused a connection on broker.sock")
    assert f"peer uid 0 is not uid {NOBODY}" in line


def test_loopds_uid_on_owner_sock_is_refused_even_with_the_file_opened(rig: Rig) -> None:
    start(rig)
    st = os.stat(rig.owner_socket)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    assert as_user(NOBODY, rig.owner_socket, "pending") == "connect failed: Permission denied"
    os.chmod(rig.owner_socket, 0o666)  # by hand: now only SO_PEERCRED keeps loopd out
    assert as_user(NOBODY, rig.owner_socket, "pending") == "closed"
    assert rig.daemon is not None
    line = rig.daemon.wait_for_line("refused a connection on owner.sock")
    assert f"peer uid {NOBODY} is not uid 0" in line


def test_a_client_of_another_uid_on_owner_sock_is_refused(rig: Rig) -> None:
    start(rig)
    os.chmod(rig.owner_socket, 0o666)
    assert as_user(OTHER_UID, rig.owner_socket, "pending") == "closed"
    assert rig.daemon is not None
    line = rig.daemon.wait_for_line(f"peer uid {OTHER_UID}")
    assert "owner.sock" in line
    conn = rig.owner()  # the owner still gets in
    with conn.sock:
        conn.send("pending", {}, True)
        got = conn.recv()
    assert got is not None
    assert got.kind == "pending"
