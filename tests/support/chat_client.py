"""A client of brokerd's chat.sock as another user: a child run with `setpriv` (so SO_PEERCRED
sees that uid), with no boxmaker import (the other user need not read the venv). It sends the
frames it is given, one at a time, and returns what came back for each: a frame's kind and body,
or "closed", or the connect error. Root and setpriv are needed (the tests skip without them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

CAN_SETUID = os.geteuid() == 0 and shutil.which("setpriv") is not None
GATEWAYD_UID = 54322  # a uid with no account: gatewayd's user in these tests
Got = list[list[Any]]  # [[kind, body], ...]: what came back for each frame sent

CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[2]))
out = []
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps([["connect failed", e.strerror]])); sys.exit()

def exact(n):
    data = b""
    while len(data) < n:
        got = s.recv(n - len(data))
        if not got:
            return None
        data += got
    return data

for kind, body in json.loads(sys.argv[3]):
    frame = json.dumps({"kind": kind, "final": True, "body": body}, separators=(",", ":"))
    try:
        s.sendall(len(frame.encode()).to_bytes(4, "big") + frame.encode())
        head = exact(4)
        data = head and exact(int.from_bytes(head, "big"))
    except (BrokenPipeError, ConnectionResetError):
        data = None
    if not data:
        out.append(["closed", None]); break
    got = json.loads(data)
    out.append([got["kind"], got["body"]])
print(json.dumps(out))
"""


def as_uid(uid: int, path: str, frames: list[tuple[str, dict[str, Any]]], bound_s: float) -> Got:
    """[[kind, body], ...] for `frames` sent on `path` by a process of `uid`."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    child = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-I", "-c",
         CLIENT, path, str(bound_s), json.dumps(frames)],
        capture_output=True, text=True, timeout=bound_s * 2, check=False,
    )  # fmt: skip
    assert child.stderr == "", child.stderr
    return list(json.loads(child.stdout))
