"""bxctl sessions over real session logs made by session.store (good, tampered, torn)."""

import os
from pathlib import Path

import orjson
import pytest

from boxmaker._cli import ExitStatus
from boxmaker.bxctl.cli import main
from tests.support.cli import run_cli
from tests.support.session.session_cases import CONVERSATION, make_session, t


@pytest.fixture(autouse=True)
def no_home_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOXMAKER_HOME", raising=False)


def sessions(*args: str | Path) -> tuple[int, str, str]:
    r = run_cli(main, ["sessions", *args])
    return r.status, r.stdout, r.stderr


def test_lists_sessions_newest_first_with_counts_and_the_verdict(tmp_path: Path) -> None:
    make_session(tmp_path, "old", CONVERSATION[:3])  # last activity t(3)
    make_session(tmp_path, "new", CONVERSATION)  # last activity t(10)
    tampered = make_session(tmp_path, "bad", CONVERSATION[:6])  # last line t(6)
    lines = tampered.read_bytes().splitlines(keepends=True)
    tampered.write_bytes(b"".join([*lines[:3], *lines[4:]]))  # line 4 is gone
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    status, out, err = sessions("--home", tmp_path)
    assert (status, err) == (ExitStatus.ERROR, "")  # one does not verify
    assert out.splitlines() == [
        "SESSION  RECORDS  EPOCHS  LAST ACTIVITY             LOG",
        f"new           11       1  {t(10)}  ok",
        f"bad            6       1  {t(6)}  FAILED: {tampered}: line 4: seq is 4, expected 3 "
        "(a line is missing, repeated or out of order)",
        f"old            4       1  {t(3)}  ok",
    ]
    # Read-only: nothing was written or created.
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_json_is_one_object_per_line(tmp_path: Path) -> None:
    log = make_session(tmp_path, "s1")
    status, out, _ = sessions("--home", tmp_path, "--json")
    assert status == ExitStatus.OK
    assert [orjson.loads(line) for line in out.splitlines()] == [
        {
            "session": "s1",
            "ok": True,
            "records": len(CONVERSATION) + 1,
            "epochs": 1,
            "last_activity": t(10),
            "log": str(log),
            "error": None,
        }
    ]


def test_a_torn_last_line_counts_complete_lines_and_the_last_good_time(tmp_path: Path) -> None:
    log = make_session(tmp_path, "torn", CONVERSATION[:4])
    with open(log, "ab") as f:
        f.write(b'{"type":"user","ti')
    status, out, _ = sessions("--home", tmp_path, "--json")
    assert status == ExitStatus.ERROR
    [j] = [orjson.loads(line) for line in out.splitlines()]
    assert (j["ok"], j["records"], j["last_activity"]) == (False, 5, t(4))
    assert j["error"] == f"{log}: line 6: no newline at the end; the last line is incomplete " + (
        "(a torn write?); this torn last line is the only fault: `bxctl repair torn` cuts it"
    )


def test_a_log_with_no_time_falls_back_to_the_file_time(tmp_path: Path) -> None:
    log = make_session(tmp_path, "junk")
    log.write_bytes(b"not json\n")
    os.utime(log, (1_800_000_000, 1_800_000_000))
    _, out, _ = sessions("--home", tmp_path, "--json")
    [j] = [orjson.loads(line) for line in out.splitlines()]
    assert (j["ok"], j["records"], j["last_activity"]) == (False, 1, "2027-01-15T08:00:00.000Z")


def test_empty_and_missing_homes_say_so(tmp_path: Path) -> None:
    assert sessions("--home", tmp_path) == (
        ExitStatus.OK,
        f"no sessions under {tmp_path} ({tmp_path / 'sessions'} does not exist)\n",
        "",
    )
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / ".s1.123.abcd.new").mkdir()  # a create in progress: not listed
    assert sessions("--home", tmp_path) == (ExitStatus.OK, f"no sessions under {tmp_path}\n", "")
    assert sessions("--home", tmp_path, "--json") == (ExitStatus.OK, "", "")


def test_the_home_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(tmp_path, "envy")
    monkeypatch.setenv("BOXMAKER_HOME", str(tmp_path))
    status, out, _ = sessions()
    assert status == ExitStatus.OK
    assert out.splitlines()[1].startswith("envy ")


def test_a_compacted_session_shows_its_epochs(tmp_path: Path) -> None:
    from boxmaker.session.store import SessionStore
    from tests.support.session.epoch_cases import prepared, switch_now

    prepared(tmp_path, "ep")
    with SessionStore(tmp_path).open("ep") as log:
        switch_now(log)
    status, out, _ = sessions("--home", tmp_path, "--json")
    assert status == ExitStatus.OK
    (j,) = [orjson.loads(line) for line in out.splitlines()]
    assert (j["ok"], j["epochs"], j["records"]) == (True, 2, 11 + 3)
    assert j["log"].endswith("/ep/1.jsonl")
