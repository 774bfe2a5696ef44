"""Class 9 of issue 27, the rotation: the decision log is cut into files chained to each other
(`<log>.1`, `<log>.2`, ... then `<log>`), brokerd reads only the current one at start (a bounded
read) and still knows every session's taint, a crash at any step of a rotation is completed or
undone by the next start, and `brokerd verify` and `bxctl verify-broker` check the whole chain.
A real brokerd with the smallest bound, so a few hundred calls rotate it several times."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from boxmaker.brokerd.cli import main
from boxmaker.bxctl.cli import main as bxctl
from boxmaker.session.chain import verify_chain
from boxmaker.session.chain_files import archives, read_chain
from tests.support.brokerd.rig import Rig, grant
from tests.support.cli import run_cli

ROTATE = 64 << 10
GRANTS = grant("read_file") + grant("write_file")


def start(rig: Rig) -> None:
    rig.grants_text = GRANTS
    rig.broker = {"log_rotate_bytes": ROTATE, "approval_timeout_ms": 200}
    rig.start()


def busy(rig: Rig, calls: int, session: str = "busy") -> None:
    for i in range(calls):
        rig.call("write_file", {"path": f"w{i % 7}.txt", "content": "x" * 200}, session=session)


def rotate_times(rig: Rig, times: int) -> None:
    while len(archives(str(rig.log))) < times:
        busy(rig, 20)


def verified(rig: Rig) -> int:
    out = run_cli(main, ["verify", "--log", str(rig.log)])
    assert out.status == 0, out.stdout + out.stderr
    chained = run_cli(bxctl, ["verify-broker", str(rig.log)])
    assert chained.status == 0, chained.stdout
    records, _ = verify_chain(read_chain(str(rig.log)))
    return sum(1 for r in records if r["type"] == "decision")


def test_the_log_rotates_into_chained_files_and_verifies_whole(rig: Rig) -> None:
    start(rig)
    rotate_times(rig, 3)
    rig.stop()
    files = archives(str(rig.log))
    assert [Path(f).name for f in files] == [f"{rig.log.name}.{n}" for n in (1, 2, 3)]
    for name in [*files, str(rig.log)]:
        assert os.path.getsize(name) < ROTATE + 4096  # each file near its bound, none larger
    first = orjson.loads(rig.log.read_bytes().split(b"\n", 1)[0])
    assert first["type"] == "carry"
    assert first["from"] == f"{rig.log.name}.3"
    decisions = verified(rig)
    assert decisions > 3 * ROTATE // 2000


def test_a_taint_outlives_rotation_and_restart(rig: Rig) -> None:
    start(rig)
    (rig.workspace / "page.txt").write_text("untrusted words")
    assert "untrusted" in rig.call("read_file", {"path": "page.txt"}, session="t")["content"]
    rotate_times(rig, 2)  # the read is now in an archive brokerd does not read at start
    rig.stop()
    start(rig)
    conn = rig.loopd()
    with conn.sock:
        args = orjson.dumps({"path": "out.txt", "content": "x"}).decode()
        conn.send("call", {"tool": "write_file", "arguments": args, "session": "t"}, True)
        frames = list(rig.frames(conn))
    assert frames[0].kind == "approval_needed"  # asked: the taint came through
    assert "untrusted content from read_file" in frames[0].body["summary"]
    assert "did not approve" in frames[-1].body["content"]  # and nobody answered
    assert not (rig.workspace / "out.txt").exists()
    fresh = rig.call("write_file", {"path": "ok.txt", "content": "x"}, session="clean")["content"]
    assert fresh.startswith("wrote"), fresh
    rig.stop()
    verified(rig)


def test_a_rotation_cut_after_its_first_rename_is_completed(rig: Rig) -> None:
    start(rig)
    rotate_times(rig, 1)
    rig.stop()
    os.rename(rig.log, f"{rig.log}.next")  # as if killed between the two renames
    start(rig)
    busy(rig, 3)
    rig.stop()
    assert not Path(f"{rig.log}.next").exists()
    verified(rig)


def test_a_rotation_cut_before_its_renames_is_dropped(rig: Rig) -> None:
    start(rig)
    busy(rig, 5)
    rig.stop()
    Path(f"{rig.log}.next").write_bytes(b'{"type":"carry","seq":99}\n')  # written, not renamed
    start(rig)
    busy(rig, 3)
    rig.stop()
    assert not Path(f"{rig.log}.next").exists()
    assert archives(str(rig.log)) == []
    verified(rig)


def test_a_missing_archive_breaks_the_chain_and_verify_says_so(rig: Rig) -> None:
    start(rig)
    rotate_times(rig, 3)
    rig.stop()
    os.unlink(archives(str(rig.log))[1])
    out = run_cli(main, ["verify", "--log", str(rig.log)])
    assert out.status != 0
    assert "a line is missing" in out.stdout + out.stderr
    chained = run_cli(bxctl, ["verify-broker", str(rig.log)])
    assert chained.status != 0
