"""An append that fails at each of its steps, through the store's `ops` seam (not a global patch).

`Faults` is `os` for write, fsync and ftruncate, with failures planned per call. Whatever fails,
the file ends at the last acknowledged line, the error names the file, the line, the step and
the errno, and the log goes on when it safely can: after a failed write at once, after a failed
fsync only once it has been reopened from disk and checked. A cut that fails, or a reopen that
finds something else on disk, closes the log for good with a clear reason.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker.proto import User, verify_log
from boxmaker.session.errors import AppendFailed, LogCorrupt, SessionBusy, SessionError
from boxmaker.session.store import SessionLog, SessionStore
from boxmaker.session.verify import verify_session
from tests.support.session.session_cases import CONVERSATION, make_session, t

NEXT_LINE = len(CONVERSATION) + 2  # the line the failing append would have been

Step = Callable[[int, bytes], int]


def enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def eio() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


class Faults:
    """`os`'s write/fsync/ftruncate, failing as planned: each list is used up one call at a time.

    A planned write is `("short", n)` (writes n bytes, returns n), `("raise", n, err)` (writes n
    bytes, then raises, as a write that half-landed), or None (the real call).
    """

    def __init__(self) -> None:
        self.writes: list[tuple[object, ...] | None] = []
        self.fsyncs: list[OSError | None] = []
        self.truncates: list[OSError | None] = []
        self.calls: list[str] = []

    def write(self, fd: int, data: bytes, /) -> int:
        self.calls.append("write")
        plan = self.writes.pop(0) if self.writes else None
        if plan is None:
            return os.write(fd, data)
        n = plan[1]
        assert isinstance(n, int)
        os.write(fd, data[:n])
        if plan[0] == "short":
            return n
        err = plan[2]
        assert isinstance(err, OSError)
        raise err

    def fsync(self, fd: int, /) -> None:
        self.calls.append("fsync")
        err = self.fsyncs.pop(0) if self.fsyncs else None
        if err is not None:
            raise err
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int, /) -> None:
        self.calls.append("ftruncate")
        err = self.truncates.pop(0) if self.truncates else None
        if err is not None:
            raise err
        os.ftruncate(fd, length)


@pytest.fixture
def faults() -> Faults:
    return Faults()


@pytest.fixture
def session(tmp_path: Path) -> Path:
    return make_session(tmp_path)


def open_log(home: Path, faults: Faults) -> SessionLog:
    return SessionStore(home, ops=faults).open("s1")


def acknowledged(path: Path) -> list[object]:
    return list(verify_log(path.read_bytes()).records)


WRITE_FAULTS = {
    "short write": (("short", 17), "ENOSPC (short write, 17 of"),
    "short write of nothing": (("short", 0), "ENOSPC (short write, 0 of"),
    "ENOSPC after half": (("raise", 30, enospc()), "ENOSPC (No space left on device)"),
    "EIO before any byte": (("raise", 0, eio()), "EIO (Input/output error)"),
}


@pytest.mark.parametrize("case", WRITE_FAULTS)
def test_a_failed_write_is_cut_back_and_the_same_log_goes_on(
    tmp_path: Path, session: Path, faults: Faults, case: str
) -> None:
    plan, words = WRITE_FAULTS[case]
    before = session.read_bytes()
    with open_log(tmp_path, faults) as log:
        faults.writes.append(plan)
        with pytest.raises(AppendFailed) as info:
            log.append(User(t(20), "lost"))
        message = str(info.value)
        assert message.startswith(f"{session}: the disk failed: write of line {NEXT_LINE} failed")
        assert words in message
        assert "nothing partial was kept" in message
        assert session.read_bytes() == before  # the torn part is gone, and fsynced
        assert faults.calls == ["write", "ftruncate", "fsync"]
        assert not log.closed
        log.append(User(t(21), "kept"))
        assert len(log.records) == len(CONVERSATION) + 2
    assert acknowledged(session)[-1] == User(t(21), "kept")
    assert session.read_bytes().startswith(before)
    assert verify_session(tmp_path, "s1").ok


def test_a_failed_fsync_reopens_from_disk_before_the_next_append(
    tmp_path: Path, session: Path, faults: Faults
) -> None:
    before = session.read_bytes()
    with open_log(tmp_path, faults) as log:
        faults.fsyncs.append(eio())
        with pytest.raises(AppendFailed, match=r"fsync of line \d+ failed with EIO"):
            log.append(User(t(20), "lost"))
        assert session.read_bytes() == before
        first_fd = log._fd
        # The lock is held all along, through the reopen too: nobody else gets in.
        with pytest.raises(SessionBusy):
            SessionStore(tmp_path).open("s1")
        log.append(User(t(21), "kept"))
        assert log._fd != first_fd  # a new descriptor, from a fresh open of the file
        with pytest.raises(SessionBusy):
            SessionStore(tmp_path).open("s1")
        log.append(User(t(22), "kept too"))
    assert acknowledged(session)[-2:] == [User(t(21), "kept"), User(t(22), "kept too")]
    assert verify_session(tmp_path, "s1").ok
    SessionStore(tmp_path).open("s1").close()  # closing released every descriptor's lock


def test_fsync_failing_twice_in_a_row_still_ends_at_the_last_acknowledged_line(
    tmp_path: Path, session: Path, faults: Faults
) -> None:
    with open_log(tmp_path, faults) as log:
        faults.fsyncs.extend([eio(), eio()])  # the line's fsync, then the cut's
        with pytest.raises(AppendFailed):
            log.append(User(t(20), "lost"))
        faults.fsyncs.extend([eio(), None])  # after the reopen, the line's fsync fails again
        with pytest.raises(AppendFailed):
            log.append(User(t(21), "lost too"))
        log.append(User(t(22), "kept"))
    assert acknowledged(session)[-1] == User(t(22), "kept")
    assert len(acknowledged(session)) == len(CONVERSATION) + 2


def test_a_cut_that_fails_closes_the_log_and_open_refuses_the_torn_line(
    tmp_path: Path, session: Path, faults: Faults
) -> None:
    with open_log(tmp_path, faults) as log:
        faults.writes.append(("raise", 30, enospc()))
        faults.truncates.append(eio())
        with pytest.raises(AppendFailed) as info:
            log.append(User(t(20), "lost"))
        assert "cutting back the partial line failed too (EIO" in str(info.value)
        assert "bxctl repair" in str(info.value)
        assert log.closed
        with pytest.raises(SessionError, match="the log is closed: after a failed write"):
            log.append(User(t(21), "never"))
    with pytest.raises(LogCorrupt, match=f"line {NEXT_LINE}: no newline at the end"):
        SessionStore(tmp_path).open("s1")


def test_a_reopen_that_finds_a_torn_tail_keeps_the_log_closed(
    tmp_path: Path, session: Path, faults: Faults
) -> None:
    log = open_log(tmp_path, faults)
    faults.fsyncs.append(eio())
    with pytest.raises(AppendFailed):
        log.append(User(t(20), "lost"))
    with open(session, "ab") as f:  # what the disk holds is not what was acknowledged
        f.write(b'{"type":"user"')
    for _ in range(2):  # the first append finds it; every later one says the same
        with pytest.raises(SessionError) as info:
            log.append(User(t(21), "never"))
        assert "the log is closed: " in str(info.value)
        assert "reopening after a failed fsync" in str(info.value)
        assert f"line {NEXT_LINE}: no newline at the end" in str(info.value)
    assert log.closed
    with pytest.raises(LogCorrupt):  # not busy: the closed log let go of its lock
        SessionStore(tmp_path).open("s1")


def test_a_reopen_that_finds_acknowledged_lines_missing_keeps_the_log_closed(
    tmp_path: Path, session: Path, faults: Faults
) -> None:
    lines = session.read_bytes().splitlines(keepends=True)
    log = open_log(tmp_path, faults)
    faults.fsyncs.append(eio())
    with pytest.raises(AppendFailed):
        log.append(User(t(20), "lost"))
    session.write_bytes(b"".join(lines[:-1]))  # the last acknowledged line vanished
    with pytest.raises(SessionError, match="ending elsewhere than the 11 acknowledged ones"):
        log.append(User(t(21), "never"))
    assert log.closed
