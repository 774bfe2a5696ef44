"""One writer per session across real processes (tests/session/writer.py is the other one).

The lock is the kernel's: a second process gets SessionBusy at once and writes nothing; the lock
dies with its holder; writers racing open/append/close never interleave; creators racing on one
id make it once; an open racing a create never sees a half-made session.
"""

import signal
import sys
from pathlib import Path

import pytest

from boxmaker.proto import User, verify_log
from boxmaker.session.errors import SessionBusy
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.procs import Daemon
from tests.support.session.session_cases import CONVERSATION, make_session

WRITER = [sys.executable, str(Path(__file__).with_name("writer.py"))]
ROUNDS = 150


def writer(*args: str) -> Daemon:
    return Daemon([*WRITER, *args])


def test_a_second_process_gets_busy_and_the_first_log_stays_intact(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    holder = writer("hold", str(tmp_path), "s1")
    try:
        holder.wait_for_line("locked")
        held = path.read_bytes()
        # This process, then a third one, both refused while the holder has it.
        with pytest.raises(SessionBusy):
            SessionStore(tmp_path).open("s1")
        other = writer("try", str(tmp_path), "s1")
        assert other.wait() == 0, (other.lines, other.err_lines)
        assert other.lines == ["busy"]
        assert path.read_bytes() == held  # the refused openers wrote nothing
        holder.send_signal(signal.SIGUSR1)
        holder.wait_for_line("done")
        assert holder.wait() == 0, holder.err_lines
    finally:
        holder.kill()
    records = verify_log(path.read_bytes()).records
    assert records[1 : len(CONVERSATION) + 1] == CONVERSATION
    assert [r.content for r in records[len(CONVERSATION) + 1 :]] == [  # type: ignore[union-attr]
        f"held by {holder.pid}",
        f"released by {holder.pid}",
    ]
    assert verify_session(tmp_path, "s1").ok


def test_the_lock_dies_with_its_process(tmp_path: Path) -> None:
    make_session(tmp_path)
    holder = writer("hold", str(tmp_path), "s1")
    try:
        holder.wait_for_line("locked")
        with pytest.raises(SessionBusy):
            SessionStore(tmp_path).open("s1")
    finally:
        holder.kill()  # SIGKILL: no close, no cleanup
    with SessionStore(tmp_path).open("s1") as log:
        assert log.records[-1] == User("2026-11-30T03:48:37.123Z", f"held by {holder.pid}")


def test_a_child_cannot_open_while_this_process_holds_it(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    with SessionStore(tmp_path).open("s1") as log:
        before = path.read_bytes()
        other = writer("try", str(tmp_path), "s1")
        assert other.wait() == 0, (other.lines, other.err_lines)
        assert other.lines == ["busy"]
        assert path.read_bytes() == before
        log.append(User("2026-11-30T04:00:00Z", "still the only writer"))
    assert verify_session(tmp_path, "s1").records == len(CONVERSATION) + 2


def test_racing_writers_never_interleave(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    racers = [writer("append", str(tmp_path), "s1", str(ROUNDS)) for _ in range(2)]
    counts = []
    try:
        for racer in racers:
            assert racer.wait(timeout=60) == 0, racer.err_lines
            words = racer.lines[0].split()
            counts.append((int(words[1]), int(words[3])))
    finally:
        for racer in racers:
            racer.kill()
    assert all(a + b == ROUNDS for a, b in counts)
    log = verify_log(path.read_bytes())  # every line whole, the chain unbroken
    added = [r.content for r in log.records[len(CONVERSATION) + 1 :] if isinstance(r, User)]
    assert len(added) == len(log.records) - len(CONVERSATION) - 1 == sum(a for a, _ in counts)
    for racer, (n_appended, _) in zip(racers, counts, strict=True):
        mine = [c for c in added if c.startswith(f"{racer.pid} ")]
        assert len(mine) == n_appended
        assert mine == sorted(mine, key=lambda c: int(c.split()[1]))  # in its own order


def test_racing_creators_make_each_session_once(tmp_path: Path) -> None:
    racers = [writer("create", str(tmp_path), "r", "40") for _ in range(2)]
    try:
        results = []
        for racer in racers:
            assert racer.wait(timeout=60) == 0, racer.err_lines
            words = racer.lines[0].split()
            results.append((int(words[1]), int(words[3])))
    finally:
        for racer in racers:
            racer.kill()
    assert sum(c for c, _ in results) == 40
    assert sum(e for _, e in results) == 40
    sessions = tmp_path / "sessions"
    assert sorted(p.name for p in sessions.iterdir()) == sorted(f"r-{i}" for i in range(40))
    for i in range(40):
        assert verify_session(tmp_path, f"r-{i}").records == 1


def test_an_open_racing_a_create_never_sees_a_half_made_session(tmp_path: Path) -> None:
    n = 40
    opener = writer("open", str(tmp_path), "r", str(n))
    creator = writer("create", str(tmp_path), "r", str(n))
    try:
        assert creator.wait(timeout=60) == 0, creator.err_lines
        assert opener.wait(timeout=60) == 0, opener.err_lines  # a LogCorrupt would exit 1
    finally:
        opener.kill()
        creator.kill()
    assert creator.lines == [f"created {n} exists 0"]
    _, opened, _, busy, _, missing = opener.lines[0].split()
    assert int(opened) + int(busy) + int(missing) == n * n
