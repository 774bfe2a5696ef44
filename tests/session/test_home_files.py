"""The home folder's contract, held against real `python -m boxmaker.bxctl` processes: a FIFO, a
device, a link, a folder or an oversized file where a session file should be is one clear line
and exit 1, at once, in bounded memory; never a hang, a flood or a traceback. Also a user who
cannot read the home (a real second uid through setpriv).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from boxmaker.proto import User
from boxmaker.session.baseline import BASELINE_MAX_BYTES, Baseline
from boxmaker.session.errors import LogReplaced, SessionError
from boxmaker.session.paths import BASELINE_NAME, LOG_NAME
from boxmaker.session.store import SessionStore
from tests.support.session.session_cases import CONVERSATION, T0, make_session

BOUND_S = 20.0  # a hang is what is tested: a healthy run takes well under a second


@dataclass
class Ran:
    status: int
    out: str
    err: str
    max_rss_kib: int  # the process's own peak, from wait4


# A child's ru_maxrss counts the memory of the process it was forked from (Linux keeps the old
# mm's high-water mark at exec), so a bxctl forked from this pytest process would report the
# suite's own size. A small launcher forks it instead and hands its wait4 figure back on a pipe.
_LAUNCH = """
import os, subprocess, sys, time
proc = subprocess.Popen(sys.argv[3:])
deadline = time.monotonic() + float(sys.argv[2])
while (got := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
    if time.monotonic() > deadline:
        proc.kill()
        os.waitpid(proc.pid, 0)
        os.write(int(sys.argv[1]), b"hung")
        sys.exit(0)
    time.sleep(0.01)
os.write(int(sys.argv[1]), f"{os.waitstatus_to_exitcode(got[1])} {got[2].ru_maxrss}".encode())
"""


def bxctl(*argv: str | Path, user: str | None = None) -> Ran:
    """A real bxctl process, bounded in time (a hang is a failure, not a stuck suite)."""
    cmd = [sys.executable, "-m", "boxmaker.bxctl", *map(str, argv)]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", *cmd]
    env = {k: v for k, v in os.environ.items() if k != "BOXMAKER_HOME"}
    rfd, wfd = os.pipe()
    launch = [sys.executable, "-c", _LAUNCH, str(wfd), str(BOUND_S), *cmd]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            done = subprocess.run(
                launch,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                pass_fds=(wfd,),
                timeout=BOUND_S + 10,
                check=False,
            )
        finally:
            os.close(wfd)
        with os.fdopen(rfd, "rb") as r:
            report = r.read().decode()
        out.seek(0)
        err.seek(0)
        if report == "hung":
            raise AssertionError(f"bxctl {argv} hung: no exit within {BOUND_S} s")
        assert done.returncode == 0, f"the launcher failed: {err.read()!r}"
        assert report, f"the launcher said nothing: {err.read()!r}"
        status, rss = map(int, report.split())
        return Ran(status, out.read().decode(), err.read().decode(), rss)


def plant_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def plant_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def plant_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def plant_link_to_copy(path: Path) -> None:
    copy = path.with_name(path.name + ".real")
    shutil.copy(path, copy)
    path.unlink()
    path.symlink_to(copy.name)


PLANTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (plant_fifo, "is a FIFO, not a regular file"),
    "dev-zero": (plant_zero, "is a symbolic link"),
    "folder": (plant_folder, "is a folder"),
    "link": (plant_link_to_copy, "is a symbolic link"),
}


@pytest.mark.parametrize("name", [LOG_NAME, BASELINE_NAME])
@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_special_file_is_refused_by_verify_sessions_and_repair(
    tmp_path: Path, name: str, plant: str
) -> None:
    make_session(tmp_path, "good")
    log = make_session(tmp_path, "bad")
    do, says = PLANTS[plant]
    do(log.parent / name)
    for argv in (["verify", "bad"], ["repair", "bad"], ["sessions"]):
        r = bxctl(*argv, "--home", tmp_path)
        assert r.status == 1, (argv, r)
        assert "Traceback" not in r.err, (argv, r.err)
        assert f"{log.parent / name}: {says}" in r.out + r.err, (argv, r)
    listing = bxctl("sessions", "--home", tmp_path, "--json")
    rows = {row["session"]: row for row in map(orjson.loads, listing.out.splitlines())}
    assert rows["good"]["ok"] is True  # one bad session never blocks the listing
    assert rows["good"]["records"] == len(CONVERSATION) + 1
    assert rows["bad"]["ok"] is False


def test_a_huge_garbage_baseline_is_refused_unread_in_bounded_memory(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    base = log.parent / BASELINE_NAME
    with base.open("r+b") as f:
        f.truncate(300 << 20)  # 300 MB, sparse: costs no disk
    r = bxctl("verify", "s1", "--home", tmp_path)
    assert r.status == 1
    assert f"{base}: is over its bound of {BASELINE_MAX_BYTES:,} bytes" in r.out
    assert r.max_rss_kib < 120_000, f"{r.max_rss_kib} KiB to refuse a 300 MB baseline"


def test_a_valid_baseline_over_the_bound_is_refused_on_resume(tmp_path: Path) -> None:
    """Resume does not count the budget again: the byte bound is what stops a 1 MB baseline."""
    big = Baseline("x" * (1 << 20), ())
    with SessionStore(tmp_path).create("s1", big, slot=0, time=T0):
        pass
    r = bxctl("verify", "s1", "--home", tmp_path)
    assert r.status == 1
    assert f"is over its bound of {BASELINE_MAX_BYTES:,} bytes" in r.out


def test_dev_zero_as_the_log_is_refused_without_reading(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    log.unlink()
    log.symlink_to("/dev/zero")
    r = bxctl("verify", "s1", "--home", tmp_path)
    assert r.status == 1
    assert f"{log}: is a symbolic link" in r.out
    assert r.max_rss_kib < 120_000


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="running bxctl as another user needs root and setpriv",
)
def test_a_user_who_cannot_read_the_home_gets_a_message(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_session(home)
    os.chmod(home, 0o700)
    os.chmod(tmp_path, 0o755)
    pwd.getpwnam("nobody")
    for argv in (["verify", "s1"], ["repair", "s1"], ["sessions"]):
        r = bxctl(*argv, "--home", home, user="nobody")
        assert r.status == 1, (argv, r)
        assert "Traceback" not in r.err, (argv, r.err)
        assert "Permission denied" in r.out + r.err, (argv, r)
        assert "run bxctl as the user loopd runs as" in r.out + r.err, (argv, r)


def test_an_append_checks_the_logs_identity_first(tmp_path: Path) -> None:
    log_path = make_session(tmp_path)
    with SessionStore(tmp_path).open("s1") as log:
        before = log_path.read_bytes()
        os.rename(log_path, log_path.with_name("old"))
        shutil.copy(log_path.with_name("old"), log_path)  # same bytes, another inode
        with pytest.raises(LogReplaced, match="was replaced while this session was open"):
            log.append(User(T0, "lost?"))
        assert log.closed  # the next open reads the file now at the path
        assert log_path.read_bytes() == before
        assert log_path.with_name("old").read_bytes() == before  # nothing went to the old one


def test_an_append_past_the_log_bound_is_refused_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_path = make_session(tmp_path)
    size = log_path.stat().st_size
    monkeypatch.setattr("boxmaker.session.store.LOG_MAX_BYTES", size + 10)
    with SessionStore(tmp_path).open("s1") as log:
        with pytest.raises(SessionError, match="full: this record would pass"):
            log.append(User(T0, "a record longer than ten bytes"))
        assert not log.closed
    assert log_path.stat().st_size == size
