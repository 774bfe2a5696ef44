"""Epochs (issue 21): the switch through the real store, the chain across epochs, the
roll-forward after a crash, byte for byte, and kill -9 at every step of the switch.

The property test writes generated conversations (tool calls with results of random sizes) and
compacts them at random points (before a turn or between two of its rounds, with random
keep_turns), then checks every epoch's replay, the prefix property within each epoch, that each
compaction request extends the epoch's last request, and that a crash right after the commit
point rolls forward to the same bytes.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxmaker.proto import GENESIS_PREV, EpochEnd, ToolResult, User, next_prev
from boxmaker.session import epoch_files
from boxmaker.session.crashpoint import ENV
from boxmaker.session.epochs import (
    EARLIER_HEADING,
    UNTRUSTED_MARK,
    cut_index,
    earlier_section,
    next_log,
    unpaired,
)
from boxmaker.session.errors import LogCorrupt
from boxmaker.session.recall import recall
from boxmaker.session.replay import request_messages
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.session.epoch_cases import (
    T0,
    TurnPlan,
    Writer,
    base,
    epoch_records,
    files_of,
    prepared,
    switch_now,
    thread_problem,
    turn_plans,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(turn_plans, min_size=1, max_size=8))
def test_generated_sessions_compacted_at_random_points(plans: list[TurnPlan]) -> None:
    home = Path(tempfile.mkdtemp(prefix="bt-ep-"))
    try:
        with SessionStore(home).create("s1", base(), slot=1, time=T0) as log:
            w = Writer(log)
            for plan in plans:
                w.turn(plan)
            epochs = log.epoch + 1
        # every request within an epoch extends the one before
        for reqs in w.requests.values():
            for a, b in itertools.pairwise(reqs):
                assert b[: len(a)] == a
        # the compaction request extends the epoch's last request
        for _epoch, last, compaction in w.compactions:
            assert compaction[: len(last)] == last
            assert len(compaction) == len(last) + 2 or len(compaction) > len(last)
        # no orphaned call or result in any epoch's replay; the chain verifies
        all_epochs = epoch_records(home, "s1")
        assert len(all_epochs) == epochs
        for records in all_epochs:
            recs = records[:-1] if type(records[-1]) is EpochEnd else records
            assert thread_problem(request_messages(base(), recs)) is None
            assert unpaired(recs) is None
        assert verify_session(home, "s1").ok
        # recall gives each folded record back exactly; the untrusted marker follows the folds
        path = home / "sessions" / "s1"
        tainted = False
        for e, records in enumerate(all_epochs[:-1]):
            end = records[-1]
            assert type(end) is EpochEnd
            for seq, r in enumerate(records[: end.keep_from]):
                if isinstance(r, (User, ToolResult)):
                    got = recall(path, epochs - 1, e, seq)
                    assert got.content.split("\n", 1)[1] == r.content
                    assert got.untrusted is (type(r) is ToolResult and r.untrusted)
            folded = records[: end.keep_from]
            tainted |= any(type(r) is ToolResult and r.untrusted for r in folded)
            marked = UNTRUSTED_MARK in (path / f"{e + 1}.baseline.json").read_text()
            assert marked is tainted, e
        # a crash right after each epoch_end: roll-forward gives the same bytes
        if epochs > 1:
            whole = files_of(home, "s1")
            name = f"{epochs - 1}.jsonl"
            (home / "sessions" / "s1" / name).unlink()
            with SessionStore(home).open("s1") as again:
                assert again.epoch == epochs - 1
            rolled = files_of(home, "s1")
            assert rolled[name] == w.started[epochs - 1]
            assert {**rolled, name: whole[name]} == whole
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_switch_keeps_epoch_n_and_chains_the_next(home: Path) -> None:
    prepared(home, "s1")
    before = files_of(home, "s1")
    with SessionStore(home).open("s1") as log:
        switch_now(log)
        assert log.epoch == 1
        log.append(User(T0, "next"))
    after = files_of(home, "s1")
    for name in ("0.baseline.json",):
        assert after[name] == before[name]
    assert after["0.jsonl"].startswith(before["0.jsonl"])  # one line more: the epoch_end
    end_line = after["0.jsonl"].splitlines(keepends=True)[-1]
    first = after["1.jsonl"].splitlines(keepends=True)[0]
    assert f'"prev":"{next_prev(end_line)}"'.encode() in first
    assert b'"epoch":1' in first
    records = epoch_records(home, "s1")
    assert [type(r).__name__ for r in records[1]] == [
        "SessionStart",
        "User",
        "Assistant",
        "User",
    ]  # the last whole turn (usage left behind), then the new message
    new_base = (home / "sessions" / "s1" / "1.baseline.json").read_text()
    assert EARLIER_HEADING in new_base
    assert "message 0" in new_base
    assert "message 1" in new_base
    assert "message 2" not in new_base  # kept verbatim in the log, not in the section
    finding = verify_session(home, "s1")
    assert finding.ok, finding.error
    assert finding.epochs == 2
    assert finding.turns == 4


def _tamper(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


@pytest.mark.parametrize(
    ("name", "old", "new", "says"),
    [
        ("0.jsonl", b"message 0", b"message X", "0.jsonl: line 3"),
        ("0.jsonl", b'"keep_from":7', b'"keep_from":4', "1.jsonl: does not start with"),
        ("1.jsonl", b"answer 2", b"answer X", "1.jsonl: does not start with"),
        ("1.jsonl", b"after the switch", b"after the swatch", None),
        ("1.baseline.json", b"message 0", b"message X", "1.baseline.json: its SHA-256"),
        ("1.jsonl", b'"prev":"', b'"prev":"0', "1.jsonl"),
    ],
)
def test_tampering_in_each_epoch_and_at_the_links_is_named(
    home: Path, name: str, old: bytes, new: bytes, says: str | None
) -> None:
    prepared(home, "s1")
    with SessionStore(home).open("s1") as log:
        switch_now(log)
        log.append(User(T0, "after the switch"))
        log.append(User(T0, "and one more"))
    path = home / "sessions" / "s1" / name
    _tamper(path, old, new)
    finding = verify_session(home, "s1")
    assert not finding.ok
    if says is not None:
        assert says in (finding.error or "")
    with pytest.raises(LogCorrupt):
        SessionStore(home).open("s1")


def test_a_missing_epoch_or_a_cut_epoch_end_is_named(home: Path) -> None:
    prepared(home, "s1")
    with SessionStore(home).open("s1") as log:
        switch_now(log)
        log.append(User(T0, "x"))
        switch_now(log)
    folder = home / "sessions" / "s1"
    (folder / "1.jsonl").rename(folder / "keep")
    assert "the log of epoch 1 is missing" in (verify_session(home, "s1").error or "")
    (folder / "keep").rename(folder / "1.jsonl")
    data = (folder / "0.jsonl").read_bytes()
    (folder / "0.jsonl").write_bytes(b"".join(data.splitlines(keepends=True)[:-1]))
    assert "does not end with an epoch_end" in (verify_session(home, "s1").error or "")


def test_next_log_refuses_a_log_without_epoch_end_and_the_earlier_section_is_bounded() -> None:
    with pytest.raises(ValueError, match="does not end with an epoch_end"):
        next_log("s1", 0, [User(T0, "x")], GENESIS_PREV)
    text = earlier_section("sum", ["a" * 50, "b" * 50, "c" * 30], 90)
    assert "c" * 30 in text
    assert "b" * 50 in text
    assert "a" * 50 not in text
    assert "1 older message left out" in text
    huge = earlier_section("sum", ["z" * 500], 100)
    assert "z" * 92 + "[...cut]" in huge
    assert "z" * 93 not in huge
    assert cut_index([User(T0, "a")], 1) is None


# ---- kill -9 at every step of the switch ---------------------------------------------------------

# (point, count): the steps of epoch_files.switch, in order. The epoch_end append passes the
# store's three points; the file points are reached twice (the baseline, then the log).
STEPS = [
    ("epoch_file_written", 1),
    ("epoch_file_renamed", 1),
    ("epoch_baseline_written", 1),
    ("append_before_write", 1),
    ("append_after_write", 1),
    ("append_after_fsync", 1),
    ("epoch_file_written", 2),
    ("epoch_file_renamed", 2),
]
COMMITTED = {s for s in STEPS[4:]}  # the epoch_end line is written (page cache or disk)


def _switch_in_child(home: Path, plan: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if plan is not None:
        env[ENV] = plan
    return subprocess.run(
        [sys.executable, "-m", "tests.support.session.epoch_cases", str(home), "s1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_kill_9_at_every_step_of_the_switch(tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    prepared(clean, "s1")
    before = files_of(clean, "s1")
    done = _switch_in_child(clean, None)
    assert done.returncode == 0, done.stderr
    # the uninterrupted switch, without the child's last append
    whole = files_of(clean, "s1")
    whole["1.jsonl"] = b"".join(whole["1.jsonl"].splitlines(keepends=True)[:-1])
    for point, n in STEPS:
        home = tmp_path / f"{point}-{n}"
        prepared(home, "s1")
        got = _switch_in_child(home, f"{point}:{n}")
        assert got.returncode == -signal.SIGKILL, (point, n, got.stdout, got.stderr)
        assert "switched" not in got.stdout
        with SessionStore(home).open("s1") as log:  # resume: rolls forward when committed
            assert log.epoch == (1 if (point, n) in COMMITTED else 0), (point, n)
        on_disk = files_of(home, "s1")
        if (point, n) in COMMITTED:
            assert on_disk == whole, (point, n)
        else:  # epoch n as it was (a baseline for epoch 1 may lie there, not part of it)
            on_disk.pop("1.baseline.json", None)
            assert on_disk == before, (point, n)
        assert verify_session(home, "s1").ok
        assert epoch_files.check_chain("s1", home / "sessions" / "s1")


def test_repair_cuts_a_torn_line_in_the_current_epoch_only(home: Path) -> None:
    from boxmaker.session.errors import RepairRefused
    from boxmaker.session.repair import repair_session

    prepared(home, "s1")
    with SessionStore(home).open("s1") as log:
        switch_now(log)
        log.append(User(T0, "acknowledged"))
    folder = home / "sessions" / "s1"
    good = (folder / "1.jsonl").read_bytes()
    (folder / "1.jsonl").write_bytes(good + b'{"type":"user","seq":3,"pr')
    assert not verify_session(home, "s1").ok
    done = repair_session(home, "s1")
    assert done is not None
    assert done.log == folder / "1.jsonl"
    assert done.kept.name.startswith("1.jsonl.torn-")
    assert (folder / "1.jsonl").read_bytes() == good
    assert verify_session(home, "s1").ok
    assert repair_session(home, "s1") is None
    # a fault in a closed epoch is refused, not cut
    _tamper(folder / "0.jsonl", b"message 0", b"message X")
    with pytest.raises((RepairRefused, LogCorrupt)):
        repair_session(home, "s1")
