"""Issue 37 item 7: the walk under the workspace (`tree._tree`, behind the write quota and the
set-id clearing) never skips a folder silently. A folder it cannot open is made enterable (it
is the workspace) or named in the failure; sibling folders are never held open at once (a wide
workspace cannot exhaust RLIMIT_NOFILE).

The walk runs in a child process as brokerd runs in the one-user deployment: the files' owner
without root's capabilities (as root, `setpriv` drops them all; root reads every folder, so
only this shows what a plain brokerd sees)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SET_ID = stat.S_ISUID | stat.S_ISGID
MIB = 1 << 20


def as_brokerd(code: str, nofile: int | None = None) -> str:
    """Runs `code` (paths and quota imported) as a plain brokerd; its stdout."""
    head = "import os, resource, sys\nfrom boxmaker.brokerd import quota, tree\n"
    if nofile is not None:
        head += f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile}))\n"
    argv = [sys.executable, "-c", head + textwrap.dedent(code)]
    if os.geteuid() == 0:
        argv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    "setup",
    [
        "mkdir h && chmod 0300 h",  # the case: write and enter, no read
        "mkdir h && chmod 0100 h",
        "mkdir h && chmod 0000 h",
        "mkdir -p h/i && chmod 0300 h/i && chmod 0300 h",
        "mkdir -p a/b/h && chmod 0200 a/b/h",
    ],
)
def test_writes_under_a_folder_brokerd_cannot_read_count_against_the_quota(
    tmp_path: Path, setup: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    out = as_brokerd(f"""
        import subprocess
        ws = {str(ws)!r}
        q = quota.WriteQuota(ws, 8 << 20)
        subprocess.run({setup!r}, shell=True, cwd=ws, check=True)
        where = os.path.join(ws, {setup.split()[-1]!r}, "big")
        os.chmod(os.path.dirname(where), 0o700)  # the command writes it (as its owner may)
        with open(where, "wb") as f:
            f.write(b"x" * (20 << 20))
        os.chmod(os.path.dirname(where), 0o{setup.split()[-2] if "chmod" in setup else "300"})
        print(q.over(), q.used)
    """)
    over, used = out.split()
    assert over == "True", out  # 20 MiB past an 8 MiB quota
    assert int(used) >= 20 * MIB


@pytest.mark.parametrize("folder_mode", [0o311, 0o111, 0o000, 0o300, 0o555])
def test_a_set_id_file_in_a_folder_brokerd_cannot_read_loses_its_bit(
    tmp_path: Path, folder_mode: int
) -> None:
    ws = tmp_path / "ws"
    (ws / "d" / "e").mkdir(parents=True)
    planted = ws / "d" / "e" / "s"
    planted.write_bytes(b"#!/bin/sh\n")
    os.chmod(planted, 0o4755)
    os.chmod(ws / "d" / "e", folder_mode)
    os.chmod(ws / "d", folder_mode)
    out = as_brokerd(f"print(tree.clear_set_id({str(ws)!r}))")
    assert out.strip() == "1"
    assert os.lstat(planted).st_mode & SET_ID == 0


def test_1100_folders_under_1024_descriptors_keep_no_set_id_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for i in range(1100):
        (ws / f"d{i}").mkdir(parents=True)
        f = ws / f"d{i}" / "s"
        f.write_bytes(b"")
        os.chmod(f, 0o4755)
    out = as_brokerd(f"print(tree.clear_set_id({str(ws)!r}))", nofile=1024)
    assert out.strip() == "1100"
    kept = [p for p in ws.rglob("s") if p.lstat().st_mode & SET_ID]
    assert kept == []


def test_a_folder_that_cannot_be_made_enterable_is_named_never_skipped(tmp_path: Path) -> None:
    """Another user's folder with no access (or a tree deeper than the descriptors): what is in
    it is not cleared, and the call's result says so."""
    if os.geteuid() != 0:  # CI runs as root, so it runs there
        pytest.skip(
            "brokerd makes any folder of its own uid enterable, so the one it cannot enter must "
            "be another uid's, and only root can chown a folder to one"
        )
    ws = tmp_path / "ws"
    (ws / "theirs").mkdir(parents=True)
    planted = ws / "theirs" / "s"
    planted.write_bytes(b"")
    os.chmod(planted, 0o4755)
    os.chown(ws / "theirs", 65534, 65534)
    os.chmod(ws / "theirs", 0o000)
    out = as_brokerd(f"""
        try:
            tree.clear_set_id({str(ws)!r})
        except tree.WalkFailed as exc:
            print("failed:", exc)
    """)
    assert out.startswith("failed: under "), out
    assert "theirs/" in out
    assert os.lstat(planted).st_mode & SET_ID  # kept, and said so
    counted = as_brokerd(f"q = quota.WriteQuota({str(ws)!r}, 8 << 20); print(q.over(), q.failed)")
    assert counted.startswith("True under "), counted  # what it cannot count stops the call


def test_a_tree_deeper_than_the_descriptors_says_the_walk_failed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    os.makedirs(os.path.join(ws, *["d"] * 300))
    out = as_brokerd(
        f"""
        try:
            print(tree.tree_bytes({str(ws)!r}))
        except tree.WalkFailed as exc:
            print("failed:", exc)
        """,
        nofile=100,
    )
    assert out.startswith("failed: "), out
    assert "Too many open files" in out
