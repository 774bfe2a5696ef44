"""Class 8 of issue 27: brokerd's own files never sit where the agent writes. `brokerd serve`
refuses at load a socket, owner_socket, grants, log or home inside the workspace, however the
path reaches it (a link outside into it, the workspace itself a link, `..`), and reads the grants
file by the home-file rules (no final symlink, regular, bounded): a real `brokerd serve` each time,
nothing bound and nothing logged when it refuses."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker._toml import toml_dumps
from boxmaker.brokerd.paths import MAX_GRANTS_BYTES
from tests.support.brokerd.rig import ALL_ALLOW, BOUND_S, Rig
from tests.support.procs import python_module


def write_config(
    rig: Rig, override: dict[str, str] | None = None, make_grants: bool = True
) -> Path:
    rig.workspace.mkdir(exist_ok=True)
    if make_grants:
        rig.grants.write_text(ALL_ALLOW)
    table = {
        "socket": rig.socket,
        "owner_socket": rig.owner_socket,
        "workspace": str(rig.workspace),
        "grants": str(rig.grants),
        "home": str(rig.home),
        "log": str(rig.log),
        **(override or {}),
    }
    path = rig.base / "brokerd.toml"
    path.write_text(toml_dumps({"broker": table}))
    return path


def serve(config: Path) -> subprocess.CompletedProcess[str]:
    argv = python_module("boxmaker.brokerd", "serve", "--config", str(config))
    return subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_S * 3)


def in_ws(rig: Rig, name: str) -> str:
    return str(rig.workspace / name)


def via_link_out(rig: Rig, name: str) -> str:
    """A folder outside that is a link into the workspace."""
    (rig.workspace / "sub").mkdir(parents=True, exist_ok=True)
    link = rig.base / "looks-outside"
    if not link.is_symlink():
        link.symlink_to(rig.workspace / "sub")
    return str(link / name)


def via_dot_dot(rig: Rig, name: str) -> str:
    return str(rig.base / "run" / ".." / "ws" / name)


SPELLINGS: dict[str, Callable[[Rig, str], str]] = {
    "inside": in_ws,
    "a link into it": via_link_out,
    "dot-dot": via_dot_dot,
}
KEYS = {
    "socket": "broker.sock",
    "owner_socket": "owner.sock",
    "grants": "grants.toml",
    "log": "decisions.jsonl",
    "home": "home",
}


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("key", KEYS)
def test_a_file_of_brokerds_inside_the_workspace_is_refused(
    rig: Rig, key: str, spelling: str
) -> None:
    path = SPELLINGS[spelling](rig, KEYS[key])
    if key == "grants":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(ALL_ALLOW)
    got = serve(write_config(rig, {key: path}))
    assert got.returncode == 2, got
    assert f"brokerd.toml: broker.{key}: " in got.stderr
    assert "inside the workspace" in got.stderr
    assert not Path(rig.socket).exists()
    assert not rig.log.exists()


def test_the_workspace_itself_a_link_is_resolved_too(rig: Rig) -> None:
    real = rig.base / "real-ws"
    (real / "state").mkdir(parents=True)
    link = rig.base / "ws-link"
    link.symlink_to(real)
    got = serve(write_config(rig, {"workspace": str(link), "log": str(real / "state" / "d.jsonl")}))
    assert got.returncode == 2, got
    assert "brokerd.toml: broker.log: " in got.stderr


def grants_link(rig: Rig) -> None:
    (rig.base / "real-grants.toml").write_text(ALL_ALLOW)
    rig.grants.symlink_to(rig.base / "real-grants.toml")


def grants_fifo(rig: Rig) -> None:
    os.mkfifo(rig.grants)


def grants_folder(rig: Rig) -> None:
    rig.grants.mkdir()


def grants_too_big(rig: Rig) -> None:
    rig.grants.write_text(ALL_ALLOW + "#" * MAX_GRANTS_BYTES)


def grants_missing(rig: Rig) -> None:
    rig.grants.write_text(ALL_ALLOW)
    rig.grants.rename(rig.base / "elsewhere.toml")


def grants_dangling_link(rig: Rig) -> None:
    rig.grants.symlink_to(rig.base / "nothing.toml")


BAD_GRANTS: dict[str, tuple[Callable[[Rig], None], str]] = {
    "a symlink": (grants_link, "symbolic link"),
    "a FIFO": (grants_fifo, "not a regular file"),
    "a folder": (grants_folder, "folder"),
    "over its bound": (grants_too_big, "over its bound"),
    "missing": (grants_missing, "no such file"),
    "a dangling link": (grants_dangling_link, "symbolic link"),
}


@pytest.mark.parametrize("name", BAD_GRANTS)
def test_the_grants_file_is_read_by_the_home_file_rules(rig: Rig, name: str) -> None:
    make, said = BAD_GRANTS[name]
    make(rig)
    config = write_config(rig, make_grants=False)
    got = serve(config)  # a FIFO never blocks it: the bound on serve() would fail the test
    assert got.returncode == 1, got
    assert "[broker] grants:" in got.stderr
    assert str(rig.grants) in got.stderr
    assert said in got.stderr
