"""`[channel] clients` (M4: gatewayd runs as its own user): loopd admits exactly the listed uids
besides its own and root, and makes loop.sock connectable for them (0666; SO_PEERCRED decides)."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator

import pytest

from boxmaker.proto import Turn, channel_frame
from tests.support.serve import BOUND_S, ServeEnv, serve_env

NOBODY = 65534
CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect(sys.argv[1])
s.sendall(bytes.fromhex(sys.argv[2]))
out = b""
while chunk := s.recv(65536):
    out += chunk
    if b'"turn_done"' in out or b'"error"' in out:
        break
sys.stdout.write(out.decode("utf-8", "replace"))
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs a client as another uid (root)")


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        os.chmod(e.folder, 0o711)  # traversable by the other uid, as the docs say
        (e.folder / "run").mkdir(mode=0o711)
        os.chmod(e.folder / "run", 0o711)
        yield e


def as_nobody(env: ServeEnv, session: str) -> str:
    frame = channel_frame(Turn(session, "hi", False)).hex()
    done = subprocess.run(
        ["/usr/bin/python3", "-c", CLIENT, str(env.socket), frame],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=BOUND_S * 4,
        check=False,
    )
    return done.stdout + done.stderr


def test_a_listed_uid_is_served_and_the_socket_is_0666(env: ServeEnv) -> None:
    daemon = env.start(clients=[NOBODY])
    assert stat.S_IMODE(os.lstat(env.socket).st_mode) == 0o666
    assert '"turn_done"' in as_nobody(env, "from-nobody")
    assert daemon.count_lines("refused a connection") == 0


def test_without_clients_another_uid_is_refused(env: ServeEnv) -> None:
    daemon = env.start()
    os.chmod(env.socket, 0o666)  # even with the file opened up, SO_PEERCRED refuses it
    got = as_nobody(env, "from-nobody")
    assert '"turn_done"' not in got
    daemon.wait_for_line("refused a connection", BOUND_S)
