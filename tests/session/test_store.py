"""session.store on real files: create, append, reopen, modes, bad ids, and one writer per log."""

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.proto import (
    GENESIS_PREV,
    EncodeError,
    SessionIdError,
    SessionStart,
    User,
    decode_line,
    verify_log,
)
from boxmaker.session.baseline import Baseline
from boxmaker.session.errors import NoSuchSession, SessionBusy, SessionError, SessionExists
from boxmaker.session.paths import BASELINE_NAME, LOG_NAME
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.procs import Daemon
from tests.support.session.session_cases import BASELINE, CONVERSATION, T0, make_session, t

WRITER = [sys.executable, str(Path(__file__).with_name("writer.py"))]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- create, append, open -------------------------------------------------------------------------


def test_create_writes_the_baseline_then_session_start(tmp_path: Path) -> None:
    with SessionStore(tmp_path).create("s1", BASELINE, slot=1, time=T0) as log:
        assert log.session_id == "s1"
        assert log.path == tmp_path / "sessions" / "s1"
        assert log.baseline == BASELINE
        assert log.records == (SessionStart(T0, "s1", 0, 1, BASELINE.hash),)
    folder = tmp_path / "sessions" / "s1"
    assert sorted(p.name for p in folder.iterdir()) == [BASELINE_NAME, LOG_NAME]
    assert (folder / BASELINE_NAME).read_bytes() == BASELINE.to_bytes()
    first = decode_line((folder / LOG_NAME).read_bytes())
    assert (first.seq, first.prev) == (0, GENESIS_PREV)
    assert first.record == SessionStart(T0, "s1", 0, 1, BASELINE.hash)
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == ["s1"]  # no leftovers


def test_appended_records_come_back_on_open(tmp_path: Path) -> None:
    make_session(tmp_path)
    with SessionStore(tmp_path).open("s1") as log:
        assert log.records[1:] == CONVERSATION
        assert log.baseline == BASELINE
        log.append(User(t(50), "one more"))
    with SessionStore(tmp_path).open("s1") as log:
        assert log.records[-1] == User(t(50), "one more")
        assert len(log.records) == len(CONVERSATION) + 2


def test_each_append_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    with SessionStore(tmp_path).create("s1", BASELINE, slot=0, time=T0) as log:
        for i, record in enumerate(CONVERSATION, start=2):
            log.append(record)
            # Read through another file description, as a crash-restarted reader would.
            on_disk = verify_log(log.log_path.read_bytes())
            assert on_disk.next_seq == i
            assert on_disk.records[-1] == record


def test_append_is_one_write_of_the_whole_line_then_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SessionStore(tmp_path).create("s1", BASELINE, slot=0, time=T0)
    calls: list[tuple[str, int, bytes]] = []
    real_write, real_fsync = os.write, os.fsync

    def write(fd: int, data: bytes) -> int:
        calls.append(("write", fd, bytes(data)))
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        calls.append(("fsync", fd, b""))
        real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    before = log.log_path.read_bytes()
    log.append(CONVERSATION[0])
    monkeypatch.undo()
    line = log.log_path.read_bytes()[len(before) :]
    assert calls == [("write", calls[0][1], line), ("fsync", calls[0][1], b"")]
    log.close()


def test_create_fsyncs_the_files_and_both_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    SessionStore(tmp_path).create("s1", BASELINE, slot=0, time=T0).close()
    monkeypatch.undo()
    sessions = tmp_path / "sessions"
    # home/ (it gained sessions/), the two files, the new folder under its hidden name, then
    # sessions/ once the folder is renamed into it.
    assert len(synced) == 5, synced
    hidden = Path(synced[3])
    assert hidden.parent == sessions
    assert hidden.name.startswith(".s1.")
    assert synced == [
        str(tmp_path),
        str(hidden / BASELINE_NAME),
        str(hidden / LOG_NAME),
        str(hidden),
        str(sessions),
    ]


def test_create_refuses_an_existing_session_and_changes_nothing(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    before = path.read_bytes()
    with pytest.raises(SessionExists, match="session s1 already exists"):
        SessionStore(tmp_path).create("s1", Baseline("other", ()), slot=0, time=T0)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.parent.iterdir()) == ["s1"]


def test_exists(tmp_path: Path) -> None:
    s = SessionStore(tmp_path)
    assert not s.exists("s1")
    make_session(tmp_path)
    assert s.exists("s1")


def test_a_log_that_cannot_be_opened_for_writing_is_a_session_error(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    path.unlink()
    path.mkdir()  # EISDIR even for root, where a file mode would not stop the open
    with pytest.raises(SessionError, match=r"0.jsonl: is a folder, not a file \(move it away\)"):
        SessionStore(tmp_path).open("s1")


def test_open_of_a_missing_session(tmp_path: Path) -> None:
    with pytest.raises(NoSuchSession, match="no session nope"):
        SessionStore(tmp_path).open("nope")


def test_bad_values_are_refused_before_anything_is_made(tmp_path: Path) -> None:
    s = SessionStore(tmp_path / "home")
    with pytest.raises(EncodeError, match="time"):
        s.create("s1", BASELINE, slot=0, time="yesterday")
    with pytest.raises(EncodeError, match="slot"):
        s.create("s1", BASELINE, slot=-1, time=T0)
    assert not (tmp_path / "home").exists()


def test_append_after_close_and_a_second_session_start_are_refused(tmp_path: Path) -> None:
    log = SessionStore(tmp_path).create("s1", BASELINE, slot=0, time=T0)
    with pytest.raises(SessionError, match="only create writes a session_start"):
        log.append(SessionStart(T0, "s1", 0, 0, BASELINE.hash))
    with pytest.raises(EncodeError):
        log.append(User("not a time", "x"))
    log.close()
    log.close()  # harmless
    with pytest.raises(SessionError, match="the log is closed"):
        log.append(User(T0, "x"))
    assert verify_log(log.log_path.read_bytes()).next_seq == 1


def test_a_failed_write_is_cut_back_and_the_log_goes_on(tmp_path: Path) -> None:
    # A real short write (RLIMIT_FSIZE): the partial line is cut, the same log appends later.
    path = make_session(tmp_path)
    before = path.read_bytes()
    child = Daemon([*WRITER, "fsize", str(tmp_path), "s1"])
    assert child.wait() == 0, child.err_lines
    assert "the disk failed: write of line 12 failed" in child.lines[0]
    assert "nothing partial was kept" in child.lines[0]
    assert child.lines[1:] == ["closed False", "appended after"]
    records = verify_log(path.read_bytes()).records
    assert path.read_bytes().startswith(before)
    assert records[-1] == User("2026-11-30T03:48:37.123Z", "after")
    assert len(records) == len(CONVERSATION) + 2
    assert verify_session(tmp_path, "s1").ok


# --- modes ----------------------------------------------------------------------------------------


@pytest.fixture(
    params=[0o000, 0o022, 0o077, 0o277], ids=["umask000", "umask022", "umask077", "umask277"]
)
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_folders_are_0700_and_files_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    home = tmp_path / "home"
    make_session(home)
    for folder in (home, home / "sessions", home / "sessions" / "s1"):
        assert mode(folder) == 0o700, folder
    for name in (LOG_NAME, BASELINE_NAME):
        assert mode(home / "sessions" / "s1" / name) == 0o600, name


# --- bad ids --------------------------------------------------------------------------------------

BAD_IDS = {
    "dot-dot": "../x",
    "empty": "",
    "129 chars": "a" * 129,
    "NUL": "ab\x00c",
    "absolute": "/abs",
    "dot": ".",
    "slash inside": "a/b",
    "newline at the end": "abc\n",
}


@pytest.fixture
def no_filesystem(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any file system call from here on fails the test."""

    def touched(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the file system was touched: {args!r}")

    for name in ("open", "mkdir", "stat", "lstat", "rename", "listdir", "scandir", "access"):
        monkeypatch.setattr(os, name, touched)


@pytest.mark.parametrize("bad", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_a_bad_id_is_refused_before_the_filesystem_is_touched(
    tmp_path: Path, bad: str, request: pytest.FixtureRequest
) -> None:
    home = tmp_path / "home"
    s = SessionStore(home)
    request.getfixturevalue("no_filesystem")
    with pytest.raises(SessionIdError, match="is refused"):
        s.create(bad, BASELINE, slot=0, time=T0)
    with pytest.raises(SessionIdError):
        s.open(bad)
    with pytest.raises(SessionIdError):
        s.exists(bad)
    with pytest.raises(SessionIdError):
        verify_session(home, bad)


def test_the_filesystem_guard_catches_a_touch(tmp_path: Path, no_filesystem: None) -> None:
    with pytest.raises(AssertionError, match="the file system was touched"):
        SessionStore(tmp_path).open("fine")


def test_the_longest_id_is_fine(tmp_path: Path) -> None:
    make_session(tmp_path, "a" * 128)
    assert verify_session(tmp_path, "a" * 128).ok


# --- one writer -----------------------------------------------------------------------------------


def test_a_second_open_in_this_process_is_busy_until_the_first_closes(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    s = SessionStore(tmp_path)
    first = s.open("s1")
    with pytest.raises(SessionBusy, match="session s1 is open elsewhere"):
        s.open("s1")
    with pytest.raises(SessionBusy):
        SessionStore(tmp_path).open("s1")  # another store object: the same file, the same lock
    first.append(User(t(60), "still mine"))
    first.close()
    with s.open("s1") as again:
        assert again.records[-1] == User(t(60), "still mine")
    assert verify_log(path.read_bytes()).next_seq == len(CONVERSATION) + 2


def test_create_holds_the_lock(tmp_path: Path) -> None:
    s = SessionStore(tmp_path)
    with s.create("s1", BASELINE, slot=0, time=T0), pytest.raises(SessionBusy):
        s.open("s1")


def test_a_dropped_log_releases_its_lock(tmp_path: Path) -> None:
    make_session(tmp_path)
    s = SessionStore(tmp_path)
    s.open("s1")  # not kept: collected at once
    s.open("s1").close()


def test_verify_reads_beside_an_open_writer(tmp_path: Path) -> None:
    make_session(tmp_path)
    with SessionStore(tmp_path).open("s1"):
        found = verify_session(tmp_path, "s1")
    assert found.ok
    assert found.records == len(CONVERSATION) + 1
