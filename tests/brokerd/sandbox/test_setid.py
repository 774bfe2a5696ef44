"""Class 7 of issue 27: the sandbox cannot plant a set-id program. Inside, the workspace is
mounted nosuid,nodev; after every call brokerd clears every set-uid/set-gid bit under it (made
by chmod, install, python, in nested folders, on a file it cannot read); never through a symlink
to a host file; and `write_file` replacing a set-id file never keeps the bit."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import pytest

from boxmaker.brokerd.paths import Workspace, write_atomic
from boxmaker.brokerd.sandbox import SandboxLimits
from tests.support.brokerd.sandbox import PYTHON, Rig, make_rig

LIMITS = SandboxLimits(timeout_ms=10_000)
SET_ID = stat.S_ISUID | stat.S_ISGID

PLANTS = {
    "chmod 4755": ("cp /bin/sh s && chmod 4755 s", "s"),
    "chmod 2755": ("cp /bin/sh g && chmod 2755 g", "g"),
    "u+s,g+s nested": ("mkdir -p d/e/f && cp /bin/sh d/e/f/x && chmod u+s,g+s d/e/f/x", "d/e/f/x"),
    "python chmod 6777": (f"{PYTHON} -c \"import os; open('p','w'); os.chmod('p', 0o6777)\"", "p"),
    "install -m 4755": ("install -m 4755 /bin/sh i", "i"),
    "unreadable 4300": ("cp /bin/sh u && chmod 4300 u", "u"),
    "set-gid folder": ("mkdir sg && chmod 2777 sg", "sg"),
    "hidden name": ("mkdir -p .h && cp /bin/sh '.h/ x' && chmod 4711 '.h/ x'", ".h/ x"),
}


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from make_rig(LIMITS)


@pytest.mark.parametrize("name", PLANTS)
def test_no_set_id_bit_survives_a_call(rig: Rig, name: str) -> None:
    command, path = PLANTS[name]
    # Inside, the bit is set (the command saw it), so only brokerd's clearing can remove it.
    out = rig.run(f"{command} && stat -c %A '{path}'")
    assert any(c in out for c in "sS"), out
    mode = os.lstat(rig.workspace / path).st_mode
    assert mode & SET_ID == 0, f"{name}: {stat.filemode(mode)} kept a set-id bit"


def test_the_workspace_is_nosuid_and_nodev_inside(rig: Rig) -> None:
    out = rig.run("grep ' /workspace ' /proc/self/mountinfo")
    options = out.split()[5].split(",")
    assert "nosuid" in options
    assert "nodev" in options


def test_a_symlink_to_a_host_set_id_file_is_not_followed(rig: Rig) -> None:
    host = rig.outside / "setuid-canary"
    host.write_bytes(b"#!/bin/sh\n")
    os.chmod(host, 0o4755)
    rig.run(f"ln -s {host} link && ln -s ../{host.name} link2 && mkdir d && ln -s {host} d/l")
    assert stat.S_IMODE(os.stat(host).st_mode) == 0o4755


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o6711, 0o4700, 0o2644])
def test_write_file_over_a_set_id_file_drops_the_bit(tmp_path: object, mode: int) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    (tmp_path / "prog").write_bytes(b"old")
    os.chmod(tmp_path / "prog", mode)
    ws = Workspace(str(tmp_path))
    try:
        write_atomic(ws, ("prog",), b"new")
    finally:
        ws.close()
    got = stat.S_IMODE(os.stat(tmp_path / "prog").st_mode)
    assert got == mode & 0o777
