"""Class 6 of issue 27: brokerd started the way docs/operations.md and conf/programs/brokerd.conf
say for two users (setpriv to the owner with CAP_CHOWN, ambient), with real uids: the owner's
for brokerd, a second uid for loopd. Shell must be on, and a command run from loopd's uid must
run with no capability at all, whatever ambient capabilities brokerd was started with."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker._toml import toml_dumps
from tests.support.brokerd.rig import BOUND_S, remove, short_base
from tests.support.procs import Daemon, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("bwrap") is None,
    reason="starting brokerd as a second user needs root, setpriv and bwrap",
)

ROOT = Path(__file__).resolve().parents[2]
LOOPD_UID = 54321  # a uid with no account: loopd's user
OWNER = "nobody"  # an account that exists everywhere: --init-groups needs a name

# One call frame out as loopd's uid (no boxmaker import: that user need not read the venv), and
# the result's content back.
CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[2]))
s.connect(sys.argv[1])
body = {"tool": "shell", "arguments": json.dumps({"command": sys.argv[3]}), "session": "s"}
data = json.dumps({"kind": "call", "final": True, "body": body}).encode()
s.sendall(len(data).to_bytes(4, "big") + data)
buf = b""
while True:
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        chunk = s.recv(65536)
        if not chunk:
            print("closed"); sys.exit()
        buf += chunk
    size = int.from_bytes(buf[:4], "big")
    frame, buf = json.loads(buf[4 : 4 + size]), buf[4 + size :]
    if frame["kind"] == "result":
        print(frame["body"]["content"]); sys.exit()
"""

SHELL_GRANT = '[[grant]]\ntool = "shell"\nmode = "allow"\n'


def documented_setpriv() -> list[str]:
    """The setpriv part of the start line, as conf/programs/brokerd.conf ships it (commented),
    checked to be the one docs/operations.md gives."""
    conf = (ROOT / "conf" / "programs" / "brokerd.conf").read_text()
    lines = conf.split(";command=setpriv", 1)[1].split("\n")
    text = "setpriv" + lines[0] + " " + lines[1].lstrip(";").strip()
    argv = text.split("%(ENV_BOXMAKER_PYTHON)s")[0].split()
    docs = (ROOT / "docs" / "operations.md").read_text()
    found = re.search(r"`(setpriv [^`]*?) python -m boxmaker\.brokerd", docs, re.S)
    assert found is not None, "docs/operations.md no longer gives the setpriv start line"
    assert found.group(1).split() == argv
    return argv


def start_as_owner(
    base: Path,
    setpriv: list[str],
    grants: str = SHELL_GRANT,
    extra: dict[str, int] | None = None,
) -> Daemon:
    owner = pwd.getpwnam(OWNER)
    for name in ("run", "ws", "state", "home"):
        (base / name).mkdir(exist_ok=True)
        os.chown(base / name, owner.pw_uid, owner.pw_gid)
    (base / "grants.toml").write_text(grants)
    table = {
        "socket": str(base / "run" / "broker.sock"),
        "owner_socket": str(base / "run" / "owner.sock"),
        "workspace": str(base / "ws"),
        "grants": str(base / "grants.toml"),
        "home": str(base / "home"),
        "log": str(base / "state" / "decisions.jsonl"),
        "loopd_uid": LOOPD_UID,
        "owner_uid": owner.pw_uid,
        **(extra or {}),
    }
    (base / "brokerd.toml").write_text(toml_dumps({"broker": table}))
    group = grp.getgrgid(owner.pw_gid).gr_name  # the docs' `owner` group is the owner's own
    argv = [a.replace("owner", OWNER) if a.startswith("--reuid") else a for a in setpriv]
    argv = [a.replace("owner", group) if a.startswith("--regid") else a for a in argv]
    serve = [sys.executable, "-m", "boxmaker.brokerd", "serve", "--config"]
    return Daemon([*argv, *serve, str(base / "brokerd.toml")])


def as_loopd(base: Path, command: str) -> str:
    argv = ["setpriv", f"--reuid={LOOPD_UID}", f"--regid={LOOPD_UID}", "--clear-groups"]
    argv += ["/usr/bin/python3", "-I", "-c", CLIENT, str(base / "run" / "broker.sock")]
    child = subprocess.run(
        [*argv, str(BOUND_S), command], capture_output=True, text=True, timeout=BOUND_S * 3
    )
    assert child.stderr == ""
    return child.stdout


# The documented line, and the same start with more ambient capabilities (a start line edited
# on a device, or a supervisor that passes its own): none may reach the sandbox.
AMBIENT = {
    "as documented": None,
    "chown,fowner": "+chown,+fowner",
    "chown,dac_override": "+chown,+dac_override",
    "chown,setuid,setgid": "+chown,+setuid,+setgid",
    "chown,net_bind_service,kill": "+chown,+net_bind_service,+kill",
}


@pytest.mark.parametrize("name", AMBIENT)
def test_the_documented_two_user_start_has_shell_on(name: str) -> None:
    setpriv = documented_setpriv()
    if (caps := AMBIENT[name]) is not None:
        setpriv = [f"--inh-caps={caps}" if a.startswith("--inh-caps") else a for a in setpriv]
        setpriv = [f"--ambient-caps={caps}" if a.startswith("--ambient") else a for a in setpriv]
    base = short_base()
    daemon = start_as_owner(base, setpriv)
    try:
        line = daemon.wait_for_line("listening on", BOUND_S)
        assert "shell: sandbox ready" in line, line
        out = as_loopd(base, "id -u; grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status")
        owner_uid = pwd.getpwnam(OWNER).pw_uid
        assert out.splitlines()[0] == str(owner_uid), out
        found = dict(re.findall(r"^(Cap\w+):\s+(\w+)$", out, re.M))
        assert found == dict.fromkeys(["CapInh", "CapPrm", "CapEff", "CapAmb"], "0" * 16), out
        st = os.stat(base / "run" / "broker.sock")
        assert st.st_uid == LOOPD_UID  # the chown the capability is there for still happened
    finally:
        daemon.kill()
        remove(base)


def test_held_calls_past_the_old_process_limit_leave_shell_on() -> None:
    """The issue's case under the two-user start: brokerd as the owner holds 150 asking calls
    (300 threads, past the sandbox's 64 processes), and an allowed `echo alive` still runs."""
    import socket as socket_module

    import orjson

    from boxmaker.brokerd.conn import Conn
    from boxmaker.proto.broker import BROKER_KINDS

    base = short_base()
    daemon = start_as_owner(
        base,
        documented_setpriv(),
        grants=SHELL_GRANT + '[[grant]]\ntool = "write_file"\nmode = "ask"\n',
        extra={"loopd_uid": 0, "max_held": 200, "max_connections": 400},
    )
    conns = []
    try:
        daemon.wait_for_line("listening on", BOUND_S)

        def connected() -> socket_module.socket | None:
            sock = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
            sock.settimeout(BOUND_S)
            try:
                sock.connect(str(base / "run" / "broker.sock"))
            except BlockingIOError:  # the backlog is full until brokerd accepts: again
                sock.close()
                return None
            return sock

        for i in range(150):
            conn = Conn(wait_for(connected, "brokerd to accept one more"), BROKER_KINDS)
            args = orjson.dumps({"path": f"f{i}", "content": "x"}).decode()
            conn.send("call", {"tool": "write_file", "arguments": args, "session": "s"}, True)
            conns.append(conn)
        for conn in conns:  # each is held: brokerd has a thread and a watcher for it
            got = conn.recv()
            assert got is not None
            assert got.kind == "approval_needed", got
        threads = len(os.listdir(f"/proc/{daemon.pid}/task"))
        assert threads > 2 * 150
        probe = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
        probe.settimeout(BOUND_S * 3)
        probe.connect(str(base / "run" / "broker.sock"))
        conn = Conn(probe, BROKER_KINDS)
        with probe:
            body = {"tool": "shell", "arguments": '{"command": "echo alive"}', "session": "t"}
            conn.send("call", body, True)
            got = conn.recv()
        assert got is not None
        assert got.body["content"].startswith("alive\n"), got.body
    finally:
        for conn in conns:
            conn.sock.close()
        daemon.kill()
        remove(base)
