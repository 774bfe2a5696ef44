"""Class 10 of issue 27: what a command can write is bounded everywhere. /dev is read-only but
for /dev/shm, a tmpfs capped like /tmp; the workspace bytes one call adds are counted against
`[broker.shell] write_bytes`, the command stopped once past it (one big file, many small ones,
nested folders, fallocate, python), and a call under the quota is left alone (a sparse file
counts what it holds). Also the temp name of a write cut in bytes, not characters."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.brokerd.paths import Workspace, write_atomic
from boxmaker.brokerd.sandbox import SandboxLimits
from tests.support.brokerd.sandbox import PYTHON, Rig, make_rig

MIB = 1 << 20
QUOTA = 8 * MIB
SHM = 2 * MIB
LIMITS = SandboxLimits(
    timeout_ms=60_000, write_bytes=QUOTA, shm_bytes=SHM, tmp_bytes=2 * MIB, file_bytes=1 << 30
)
# Each writer would add 200 MiB, 25 times the quota, if nothing stopped it; the quota's check
# comes every QUOTA_CHECK_S, so it is stopped far below that.
WOULD_WRITE = 200 * MIB


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from make_rig(LIMITS)


DEV_WRITES = {
    "a file in /dev": "head -c 4194304 /dev/zero > /dev/x",
    "a folder in /dev": "mkdir /dev/d && head -c 4194304 /dev/zero > /dev/d/x",
    "a file in /dev/pts": "head -c 4194304 /dev/zero > /dev/pts/x",
    "/dev/shm past its size": "head -c 4194304 /dev/zero > /dev/shm/x",
    "/dev/shm in many files": (
        "for i in 1 2 3 4 5 6; do head -c 700000 /dev/zero > /dev/shm/f$i; done"
    ),
    "/dev/mqueue": "mkdir -p /dev/mqueue && head -c 4194304 /dev/zero > /dev/mqueue/x",
}


@pytest.mark.parametrize("name", DEV_WRITES)
def test_dev_takes_no_more_than_shm_bytes(rig: Rig, name: str) -> None:
    out = rig.run(
        f"{DEV_WRITES[name]}; echo status $?; "
        "du -sb /dev 2>/dev/null | cut -f1; echo written > /dev/null && echo null-ok"
    )
    lines = out.splitlines()
    assert "null-ok" in lines, out  # the devices still work
    total = int(lines[lines.index("null-ok") - 1])
    # du counts the folders' own entries too: a few pages over the files' bytes.
    assert total <= SHM + 16 * 4096, f"{name}: {total} bytes landed in /dev: {out}"
    assert "status 0" not in lines or name.startswith("/dev/shm in")  # the write failed


WRITERS = {
    "one big file": f"head -c {WOULD_WRITE} /dev/zero > big",
    "many small files": (
        "i=0; while [ $i -lt 3200 ]; do head -c 65536 /dev/zero > f$i; i=$((i+1)); done"
    ),
    "nested folders": (
        "for i in $(seq 200); do mkdir -p d$i/e && head -c 1048576 /dev/zero > d$i/e/x; done"
    ),
    "fallocate": "for i in $(seq 200); do fallocate -l 1048576 a$i; done",
    "python": (
        f"{PYTHON} -c \"\nfor i in range(200):\n    open(f'p{{i}}', 'wb').write(bytes(1 << 20))\n\""
    ),
}


@pytest.mark.parametrize("name", WRITERS)
def test_a_call_past_the_write_quota_is_stopped(rig: Rig, name: str) -> None:
    out = rig.run(WRITERS[name])
    assert "over the quota" in out, out
    assert "write_bytes" in out
    assert "the command was stopped" in out
    added = sum(p.lstat().st_blocks * 512 for p in rig.workspace.rglob("*"))
    # The quota is checked every 0.1 s while the command runs, so how far past it a command
    # gets is its write rate times that (139 MB of 200 seen on a loaded machine): stopped before
    # it wrote all it meant to is what holds whatever the load.
    assert QUOTA < added < WOULD_WRITE, f"{name}: {added} bytes"


UNDER = {
    "one file": "head -c 4194304 /dev/zero > a",
    "a sparse file": "truncate -s 512M sparse",  # 64 times the quota in size, nothing held
    "written then removed": "for i in 1 2 3; do head -c 6291456 /dev/zero > t; rm t; done",
    "many tiny files": "for i in $(seq 300); do echo $i > t$i; done",
    "rewritten in place": "for i in $(seq 20); do head -c 2097152 /dev/zero > same; done",
}


@pytest.mark.parametrize("name", UNDER)
def test_a_call_under_the_quota_is_left_alone(rig: Rig, name: str) -> None:
    out = rig.run(UNDER[name])
    assert "over the quota" not in out, out
    assert out.endswith("[exit status 0]"), out


@pytest.mark.parametrize(
    "name",
    [
        "🙂" * 63,  # 252 bytes, 63 characters: the case
        "é" * 127,  # 254 bytes
        "a" * 255,
        "日本" * 42,  # 252 bytes
        "x" + "🙂" * 63,  # 253 bytes
    ],
)
def test_a_long_multibyte_name_can_be_written(tmp_path: Path, name: str) -> None:
    assert len(name.encode()) <= 255
    ws = Workspace(str(tmp_path))
    try:
        write_atomic(ws, (name,), b"content")
    finally:
        ws.close()
    assert (tmp_path / name).read_bytes() == b"content"
    assert os.listdir(tmp_path) == [name]  # no temp file left


@pytest.mark.parametrize("size", [1001, 1500, 4096, 50_000, 99_999])
def test_an_edit_over_max_write_bytes_names_that_key(size: int) -> None:
    from tests.support.brokerd.rig import Rig, remove, short_base

    rig = Rig(short_base())
    rig.broker = {"max_write_bytes": 1000, "max_file_bytes": 100_000}
    try:
        rig.workspace.mkdir()
        (rig.workspace / "f").write_bytes(b"a" * (size - 1) + b"Z")
        rig.start()
        text = rig.call("edit_file", {"path": "f", "old": "Z", "new": "Y"})["content"]
        assert "max_write_bytes" in text, text
        assert "max_file_bytes" not in text, text
        # read_file's own bound is the other key, and says so
        read = rig.call("read_file", {"path": "f"})["content"]
        assert "max_file_bytes" not in read or size > 100_000
    finally:
        if rig.daemon is not None:
            rig.daemon.kill()
        remove(rig.base)
