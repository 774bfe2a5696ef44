"""The session store on a real disk that fills up: a 64 KiB tmpfs
(tests/support/session/smalldisk.py).

Mounting needs root, which CI and the dev container have; without it these tests fail with the
reason instead of skipping. Appends go on until the disk refuses one (a short write into the
last page, or ENOSPC). The refused line must leave no trace: the log verifies, holds exactly the
acknowledged records, and once space is freed the same open log appends again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker.proto import User, verify_log
from boxmaker.session.errors import AppendFailed, SessionError
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.session.session_cases import BASELINE, T0, t
from tests.support.session.smalldisk import fill, free, small_disk

RECORD_CHARS = 700  # a few records per 4 KiB page, so a line lands across a page boundary


def test_enospc_leaves_exactly_the_acknowledged_records(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as home:
        with SessionStore(home).create("s1", BASELINE, slot=0, time=T0) as log:
            fill(home)
            acknowledged: list[object] = list(log.records)
            failure: AppendFailed | None = None
            for i in range(50):  # the disk is full: a page's slack is all there is
                record = User(t(i), f"{i} " + "x" * RECORD_CHARS)
                try:
                    log.append(record)
                except AppendFailed as e:
                    failure = e
                    break
                acknowledged.append(record)
            assert failure is not None, "the full disk never refused an append"
            message = str(failure)
            assert message.startswith(f"{log.log_path}: the disk failed: write of line")
            assert "ENOSPC" in message
            assert "nothing partial was kept" in message
            assert verify_session(home, "s1").ok
            assert list(verify_log(log.log_path.read_bytes()).records) == acknowledged
            assert list(log.records) == acknowledged
            # Another refusal on the still-full disk changes nothing either.
            with pytest.raises(AppendFailed):
                log.append(User(t(60), "y" * 5000))
            assert list(verify_log(log.log_path.read_bytes()).records) == acknowledged
            free(home)
            log.append(User(t(61), "after the space came back"))
            acknowledged.append(User(t(61), "after the space came back"))
        assert list(verify_log((home / "sessions/s1/0.jsonl").read_bytes()).records) == (
            acknowledged
        )
        with SessionStore(home).open("s1") as again:  # and it resumes
            assert list(again.records) == acknowledged


def test_a_session_that_cannot_be_created_on_a_full_disk_leaves_nothing(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as home:
        SessionStore(home).create("first", BASELINE, slot=0, time=T0).close()
        fill(home)
        with pytest.raises(SessionError) as info:
            SessionStore(home).create("s2", BASELINE, slot=0, time=T0)
        assert "No space left on device" in str(info.value)
        assert sorted(p.name for p in (home / "sessions").iterdir()) == ["first"]
        free(home)
        SessionStore(home).create("s2", BASELINE, slot=0, time=T0).close()
        assert verify_session(home, "s2").ok
