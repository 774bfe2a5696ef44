"""bxctl repair: cuts a torn last line and nothing else; in-process through main(argv, env), plus
one real `python -m boxmaker.bxctl repair`, and a real second process holding the session's lock.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker._cli import ExitStatus
from boxmaker.bxctl.cli import main
from boxmaker.proto import User, verify_log
from boxmaker.session.errors import LogCorrupt
from boxmaker.session.paths import BASELINE_NAME
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.cli import Result, run_cli
from tests.support.procs import Daemon, python_module, wait_for
from tests.support.session.session_cases import CONVERSATION, make_session, t

LAST = len(CONVERSATION) + 1  # the last line's number
WRITER = [sys.executable, str(Path(__file__).parents[1] / "session/writer.py")]
ONLY_TORN = "repair only cuts the last line, when the lines before it verify"


@pytest.fixture(autouse=True)
def no_home_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOXMAKER_HOME", raising=False)


def repair(home: Path, session: str = "s1") -> Result:
    return run_cli(main, ["repair", session, "--home", home])


def folder_state(log: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in log.parent.iterdir()}


def torn_copies(log: Path) -> list[Path]:
    return sorted(log.parent.glob("0.jsonl.torn-*"))


def test_torn_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    whole = log.read_bytes()
    keep = whole.rstrip(b"\n").rfind(b"\n") + 1  # where the last line starts
    cuts = range(keep + 1, len(whole))  # every length that leaves the last line torn
    assert len(cuts) > 50
    for cut in cuts:
        torn = whole[:cut]
        log.write_bytes(torn)
        with pytest.raises(LogCorrupt, match=f"{log}: line {LAST}: no newline at the end"):
            SessionStore(tmp_path).open("s1")  # resume refuses, naming the line
        found = verify_session(tmp_path, "s1")
        assert found.error is not None
        assert "`bxctl repair s1`" in found.error
        r = repair(tmp_path)
        assert (r.status, r.stderr) == (ExitStatus.OK, ""), (cut, r)
        assert f"removed line {LAST} ({cut - keep} bytes, torn and never acknowledged)" in r.stdout
        assert log.read_bytes() == whole[:keep]
        [copy] = torn_copies(log)
        assert f"the original is kept as {copy}" in r.stdout
        assert copy.read_bytes() == torn
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        with SessionStore(tmp_path).open("s1") as opened:  # verifies, and takes appends
            assert len(opened.records) == LAST - 1
            opened.append(User(t(30), "after the repair"))
        assert verify_log(log.read_bytes()).next_seq == LAST
        copy.unlink()


def test_a_log_that_verifies_has_nothing_to_repair(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    before = folder_state(log)
    r = repair(tmp_path)
    assert (r.status, r.stdout, r.stderr) == (
        ExitStatus.OK,
        "nothing to repair: session s1 verifies\n",
        "",
    )
    assert folder_state(log) == before


def tamper_middle(log: Path) -> None:
    log.write_bytes(log.read_bytes().replace(b"What time is it?", b"What time is it!"))


def bad_last_line(log: Path) -> None:
    with open(log, "ab") as f:
        f.write(b'{"type":"user","oops":1}\n')


def edited_baseline(log: Path) -> None:
    base = log.parent / BASELINE_NAME
    base.write_bytes(base.read_bytes().replace(b"Be brief.", b"Be long."))


def torn_and_tampered(log: Path) -> None:
    tamper_middle(log)
    with open(log, "ab") as f:
        f.write(b'{"type":"user","ti')


def a_user_line_only(log: Path) -> None:
    log.write_bytes(b'{"type":"user"}\n')


REFUSALS = {
    "mid-chain tamper": (tamper_middle, "line 3: prev is"),
    "bad complete line": (bad_last_line, f"line {LAST + 1}: "),
    "baseline mismatch": (edited_baseline, "the baseline file was changed"),
    "torn and tampered": (torn_and_tampered, "line 3: prev is"),
    "a whole JSON first line": (a_user_line_only, "0.jsonl: line 1: "),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_any_other_fault_is_refused_and_left_alone(tmp_path: Path, case: str) -> None:
    log = make_session(tmp_path)
    damage, words = REFUSALS[case]
    damage(log)
    before = folder_state(log)
    r = repair(tmp_path)
    assert r.status == ExitStatus.ERROR
    assert r.stdout == ""
    assert r.stderr.startswith("bxctl repair: refused: ")
    assert words in r.stderr
    assert ONLY_TORN in r.stderr
    assert "nothing was changed" in r.stderr
    assert folder_state(log) == before  # no copy, no cut


def test_a_session_held_by_another_process_is_busy(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    holder = Daemon([*WRITER, "hold", str(tmp_path), "s1"])  # SessionStore.open, then waits
    try:
        holder.wait_for_line("locked")
        with open(log, "ab") as f:  # torn while the holder has it
            f.write(b'{"type":"user","ti')
        before = folder_state(log)
        r = repair(tmp_path)
        assert r.status == ExitStatus.ERROR
        assert r.stderr.startswith(
            f"bxctl repair: session s1 is busy: its log is held by pid {holder.pid} ("
        )
        assert "keeps its session's log for [channel] worker_idle_ms after the last turn" in (
            r.stderr
        )
        assert "run `bxctl repair s1 --wait` to wait for it, or stop loopd" in r.stderr
        assert folder_state(log) == before
    finally:
        holder.kill()
    r = repair(tmp_path)  # the lock died with its holder
    assert r.status == ExitStatus.OK, r
    assert verify_session(tmp_path, "s1").ok


def test_a_healthy_session_held_by_loopd_has_nothing_to_repair(tmp_path: Path) -> None:
    """Issue 39 item 7: right after a chat, loopd's worker holds the log for worker_idle_ms;
    repair said "busy" for those 5 minutes about a log with nothing to repair."""
    log = make_session(tmp_path)
    holder = Daemon([*WRITER, "hold", str(tmp_path), "s1"])
    try:
        holder.wait_for_line("locked")
        before = folder_state(log)
        r = repair(tmp_path)
        assert r.status == ExitStatus.OK, r
        said = f"nothing to repair: session s1 verifies (read without its lock: pid {holder.pid} ("
        assert r.stdout.startswith(said), r.stdout
        assert r.stderr == ""
        assert folder_state(log) == before
    finally:
        holder.kill()


def test_missing_session_and_bad_id(tmp_path: Path) -> None:
    r = repair(tmp_path, "nobody")
    assert r.status == ExitStatus.ERROR
    assert r.stderr.startswith("bxctl repair: no session nobody (")
    r = repair(tmp_path, "../x")
    assert r.status == ExitStatus.USAGE
    assert not (tmp_path / "sessions").exists()


def test_verify_names_repair_only_for_a_torn_last_line(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    with open(log, "ab") as f:
        f.write(b'{"type":"user"')
    r = run_cli(main, ["verify", "s1", "--home", tmp_path])
    assert r.status == ExitStatus.ERROR
    assert r.stdout.startswith(f"FAILED: session s1: {log}: line {LAST + 1}: no newline")
    assert r.stdout.endswith("this torn last line is the only fault: `bxctl repair s1` cuts it\n")
    tamper_middle(log)  # now cutting would not be enough: no suggestion
    r = run_cli(main, ["verify", "s1", "--home", tmp_path])
    assert r.status == ExitStatus.ERROR
    assert "bxctl repair" not in r.stdout


def test_a_real_bxctl_repair_process(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    whole = log.read_bytes()
    log.write_bytes(whole + b'{"type":"user","time":"2026')
    env = {**os.environ, "BOXMAKER_HOME": str(tmp_path)}
    done = subprocess.run(
        python_module("boxmaker.bxctl", "repair", "s1"),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"repaired: session s1: removed line {LAST + 1} (27 bytes")
    assert log.read_bytes() == whole
    [copy] = torn_copies(log)
    assert copy.read_bytes() == whole + b'{"type":"user","time":"2026'
    assert verify_session(tmp_path, "s1").ok


def test_a_damaged_last_line_ending_in_a_newline_is_cut(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    whole = log.read_bytes()
    log.write_bytes(whole + b"\0" * 57 + b"\n")  # a power cut: the size grew, the bytes did not
    r = repair(tmp_path)
    assert r.status == ExitStatus.OK, r
    assert f"removed line {LAST + 1} (58 bytes, damaged: a line is acknowledged after its" in (
        r.stdout
    )
    assert log.read_bytes() == whole
    (kept,) = log.parent.glob("0.jsonl.damaged-*")
    assert kept.read_bytes() == whole + b"\0" * 57 + b"\n"


def test_a_duplicated_last_line_is_cut_and_nothing_is_lost(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    whole = log.read_bytes()
    last = whole[whole.rfind(b"\n", 0, len(whole) - 1) + 1 :]
    log.write_bytes(whole + last)
    found = verify_session(tmp_path, "s1")
    assert found.error is not None
    assert found.error.endswith(
        "this duplicated last line is the only fault: `bxctl repair s1` cuts it"
    )
    r = repair(tmp_path)
    assert r.status == ExitStatus.OK, r
    assert f"removed line {LAST + 1} ({len(last)} bytes, a copy of the line before it" in r.stdout
    assert log.read_bytes() == whole


@pytest.mark.parametrize("content", [b"", b'{"type":"session_st', b"\0\0\0\0\n"])
def test_a_log_with_no_whole_line_is_set_aside(tmp_path: Path, content: bytes) -> None:
    log = make_session(tmp_path)
    log.write_bytes(content)
    found = verify_session(tmp_path, "s1")
    assert found.error is not None
    assert found.error.endswith(
        "nothing in it was ever acknowledged: `bxctl repair s1` sets the session aside"
    )
    r = repair(tmp_path)
    assert r.status == ExitStatus.OK, r
    assert r.stdout.startswith(f"set aside: session s1: {log} holds no whole line (")
    (aside,) = (tmp_path / "sessions").glob(".s1.set-aside-*")
    assert (aside / "0.jsonl").read_bytes() == content
    assert (aside / BASELINE_NAME).exists()
    assert not log.parent.exists()  # the id is free: a new session may take it
    make_session(tmp_path)
    assert verify_session(tmp_path, "s1").ok


def test_repair_wait_waits_for_the_holder_to_let_go(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    holder = Daemon([*WRITER, "hold", str(tmp_path), "s1"])
    try:
        holder.wait_for_line("locked")
        with open(log, "ab") as f:  # torn while held: there is something to repair
            f.write(b'{"type":"user","ti')
        waiter = Daemon(
            python_module("boxmaker.bxctl", "repair", "s1", "--home", str(tmp_path), "--wait", "30")
        )
        wait_for(
            lambda: any("waiting up to 30 s for pid" in ln for ln in waiter.err_lines),
            "repair to say it waits",
        )
        assert waiter.proc.poll() is None  # still waiting while the lock is held
        holder.kill()  # the lock dies with its holder
        assert waiter.wait(20) == 0
        [line] = waiter.lines
        assert line.startswith("repaired: session s1: removed line "), line
    finally:
        holder.kill()
