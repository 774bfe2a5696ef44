"""Bad frames on loop.sock: one `error{bad_request}` saying what was wrong, then the connection is
closed (DECISIONS.md, "The channel frame format"); a peer of another uid is refused (SO_PEERCRED).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

import orjson
import pytest

from boxmaker.proto import ErrorCode, TurnDone, WireError
from tests.support.serve import BOUND_S, ServeEnv, connect, read_frames, turn


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def turn_body(**changes: object) -> bytes:
    body: dict[str, object] = {"session": "s", "content": "hi", "resume": False, "thinking": True}
    body.update(changes)
    return framed(orjson.dumps({"kind": "turn", "final": True, "body": body}))


BAD: dict[str, tuple[bytes, str]] = {
    "garbage": (framed(b"\x00not json at all"), "JSON"),
    "too long": ((2 * 1024 * 1024).to_bytes(4, "big") + b"{", "over the limit"),
    "zero length": (b"\x00\x00\x00\x00", "length is 0"),
    "not an object": (framed(b"[1,2]"), "object"),
    "unknown kind": (framed(b'{"kind":"hello","final":true,"body":{}}'), "unknown"),
    "a frame only loopd sends": (
        framed(
            b'{"kind":"turn_event","final":false,"body":{"event":{"type":"content","text":"x"}}}'
        ),
        "expected a turn frame",
    ),
    "turn not final": (
        framed(
            b'{"kind":"turn","final":false,"body":{"session":"s","content":"hi","resume":false}}'
        ),
        "final must be true",
    ),
    "bad session id": (turn_body(session="../etc"), "session"),
    "empty session id": (turn_body(session=""), "session"),
    "session not a string": (turn_body(session=7), "turn.session"),
    "content not a string": (turn_body(content=["hi"]), "turn.content"),
    "resume not a boolean": (turn_body(resume="yes"), "turn.resume"),
    "thinking not a boolean": (turn_body(thinking=1), "turn.thinking"),
    "a key missing": (framed(b'{"kind":"turn","final":true,"body":{"session":"s"}}'), "turn"),
    "an unknown key": (turn_body(extra=1), "extra"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_frame_gets_bad_request_and_the_connection_closes(env: ServeEnv, name: str) -> None:
    env.start()
    data, says = BAD[name]
    with connect(env.socket) as sock:
        sock.sendall(data)
        frames = read_frames(sock)
        assert sock.recv(1) == b"", "the connection stayed open after bad_request"
    assert len(frames) == 1, frames
    assert isinstance(frames[0], WireError), frames
    assert frames[0].code == ErrorCode.BAD_REQUEST
    assert says in frames[0].message, frames[0].message
    # Nothing was created for it, and loopd serves on.
    assert not (env.home / "sessions" / "s").exists()
    assert isinstance(turn(env.socket, "after", resume=False)[-1], TurnDone)


# Connects as another user and prints what it got: "closed" (EOF at once) or what it read.
CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[2]))
s.connect(sys.argv[1])
try:
    s.sendall(bytes.fromhex(sys.argv[3]))
    data = s.recv(65536)
    print("closed" if data == b"" else "answered")
except (BrokenPipeError, ConnectionResetError):
    print("closed")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="running a client as another user needs root and setpriv",
)
def test_a_peer_of_another_uid_is_refused(env: ServeEnv) -> None:
    daemon = env.start()
    nobody = pwd.getpwnam("nobody").pw_uid
    for folder in (env.folder, env.socket.parent):
        os.chmod(folder, 0o755)  # nobody may reach the socket; only we may write there
    os.chmod(env.socket, 0o666)  # by hand: the file mode no longer keeps anyone out
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    child = subprocess.run(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            python,
            "-I",
            "-c",
            CLIENT,
            str(env.socket),
            str(BOUND_S),
            turn_body(session="intruder").hex(),
        ],
        capture_output=True,
        text=True,
        timeout=BOUND_S * 2,
    )
    assert (child.stdout, child.stderr) == ("closed\n", "")
    line = daemon.wait_for_line("refused a connection")
    assert f"peer uid {nobody}" in line
    assert not (env.home / "sessions" / "intruder").exists()
    assert isinstance(turn(env.socket, "ours", resume=False)[-1], TurnDone)
