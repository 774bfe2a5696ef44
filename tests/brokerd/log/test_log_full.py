"""Class 9 of issue 27: no tool runs with its decision unlogged, and a full log never needs a
hand edit. A real brokerd under a file-size limit (RLIMIT_FSIZE: EFBIG and short writes) that
runs out at different lines of a call, and on a full tmpfs (ENOSPC): every call past the point
is refused with a line that names the log, no file is written without its allow decision on
disk, the log has no torn line and verifies, and brokerd starts again over it unedited."""

from __future__ import annotations

import os
import shutil
import subprocess

import orjson
import pytest

from boxmaker._toml import toml_dumps
from boxmaker.session.chain import verify_chain
from tests.support.brokerd.core import replay
from tests.support.brokerd.rig import Rig
from tests.support.procs import Daemon, python_module

CALLS = 12


def start(rig: Rig, prefix: list[str] | None = None) -> Daemon:
    rig.workspace.mkdir(exist_ok=True)
    rig.grants.write_text(rig.grants_text)
    table = {
        "socket": rig.socket,
        "owner_socket": rig.owner_socket,
        "workspace": str(rig.workspace),
        "grants": str(rig.grants),
        "home": str(rig.home),
        "log": str(rig.log),
    }
    (rig.base / "brokerd.toml").write_text(toml_dumps({"broker": table}))
    argv = python_module("boxmaker.brokerd", "serve", "--config", str(rig.base / "brokerd.toml"))
    rig.daemon = Daemon([*(prefix or []), *argv])
    rig.daemon.wait_for_line("listening on")
    return rig.daemon


def write_calls(rig: Rig) -> list[str]:
    return [
        str(rig.call("write_file", {"path": f"f{i}.txt", "content": f"file {i}"})["content"])
        for i in range(CALLS)
    ]


def check_log(rig: Rig, results: list[str]) -> None:
    data = rig.log.read_bytes()
    assert data.endswith(b"\n"), "a torn line was left in the log"
    records, _ = verify_chain(data)
    replay(data)  # every decision logged is decided the same again
    allowed = {r["id"] for r in records if r["type"] == "decision" and r["mode"] == "allow"}
    logged = {
        orjson.loads(r["canonical"])["path"]
        for r in records
        if r["type"] == "request" and r["id"] in allowed
    }
    written = {p.name for p in rig.workspace.iterdir()}
    assert written <= logged, f"written without an allow decision on disk: {written - logged}"
    refused = [r for r in results if "decision log" in r]
    assert refused, results
    for i, text in enumerate(results):
        if "decision log" not in text:
            continue
        assert str(rig.log) in text, text
        ran = (rig.workspace / f"f{i}.txt").exists()
        if "ran, but its result could not be logged" in text:  # issue 37 item 10
            assert ran, text  # it did run: never called "refused"
        else:
            assert text.startswith("error: refused"), text
            assert not ran, f"f{i}.txt was written, but its answer says refused: {text}"
    # Once full, it stays refused: nothing after the first refusal was written.
    first = results.index(refused[0])
    assert all("decision log" in r for r in results[first:]), results
    assert not any((rig.workspace / f"f{i}.txt").exists() for i in range(first + 1, CALLS))


def restart_unedited(rig: Rig) -> None:
    assert rig.daemon is not None
    rig.daemon.kill()
    start(rig)  # no hand edit: it opens the log as it was left
    assert rig.call("write_file", {"path": "after.txt", "content": "x"})["content"].startswith(
        "wrote"
    )
    rig.stop()
    verify_chain(rig.log.read_bytes())


# Room past the two start lines: the limit falls in the first call's request, its decision,
# its result, or one of the next calls' lines.
@pytest.mark.parametrize("room", [40, 250, 420, 700, 1300])
def test_a_file_size_limit_refuses_calls_and_leaves_a_log_that_restarts(
    rig: Rig, room: int
) -> None:
    start(rig)
    rig.stop()
    size = rig.log.stat().st_size  # one start line
    start(rig, ["prlimit", f"--fsize={2 * size + room}", "--"])
    results = write_calls(rig)
    check_log(rig, results)
    restart_unedited(rig)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root"
)
@pytest.mark.parametrize("room", [0, 4096])
def test_a_full_tmpfs_refuses_calls_and_leaves_a_log_that_restarts(rig: Rig, room: int) -> None:
    state = rig.log.parent
    state.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(state)], check=True)
    try:
        start(rig)
        filler = state / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # fill it, then give back `room`
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - room))
        os.close(fd)
        results = write_calls(rig)
        check_log(rig, results)
        filler.unlink()
        restart_unedited(rig)
    finally:
        if rig.daemon is not None:
            rig.daemon.kill()
        subprocess.run(["umount", str(state)], check=False)
