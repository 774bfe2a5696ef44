"""The epoch switch that cannot complete (issue 29 items 1 and 8), through the real store.

- A next baseline over its read bound is refused before the commit point, at every size past
  it: nothing written, epoch n as it was, the log still open and appending, the session verifies.
  (Before: `<n+1>.baseline.json` written, the `epoch_end` appended, the read-back refused, and
  every later turn appended after the `epoch_end`.)
- A file error at each step of the switch names its file; before the commit point epoch n is as
  it was, after it the log is closed and the next open rolls the switch forward.
- Nothing is ever appended after an `epoch_end`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from boxmaker.proto import Assistant, User
from boxmaker.session import epoch_files
from boxmaker.session.baseline import BASELINE_MAX_BYTES
from boxmaker.session.epochs import cut_index, epoch_end, next_baseline
from boxmaker.session.errors import SessionError, SwitchRefused
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.session.epoch_cases import SYSTEM, T0, T_END, prepared
from tests.support.session.smalldisk import fill, free, small_disk


def _switch(log: Any, summary: str) -> None:
    keep_from = cut_index(log.records, 1)
    assert keep_from is not None
    new = next_baseline(SYSTEM, log.baseline, summary, log.records, keep_from, 200)
    end = epoch_end(T_END, log.epoch, summary, keep_from, new, (1, 2, 3))
    epoch_files.switch(log, end, new)


# Sizes past the bound: just over, the 250 kB, 1 MB; and a summary of JSON escapes,
# whose characters fit but whose bytes (six a character) do not.
OVER = [BASELINE_MAX_BYTES + 1, 250_000, 1_000_000]


@pytest.mark.parametrize("summary", [*("s" * n for n in OVER), "\x01" * (BASELINE_MAX_BYTES // 5)])
def test_an_over_size_next_baseline_is_refused_before_the_commit(
    tmp_path: Path, summary: str
) -> None:
    home = tmp_path / "home"
    prepared(home, "s1")
    folder = home / "sessions" / "s1"
    before = (folder / "0.jsonl").read_bytes()
    with SessionStore(home).open("s1") as log:
        with pytest.raises(
            SwitchRefused, match=r"1\.baseline\.json: not written: .*over its bound"
        ):
            _switch(log, summary)
        assert (folder / "0.jsonl").read_bytes() == before  # no epoch_end
        assert sorted(os.listdir(folder)) == ["0.baseline.json", "0.jsonl"]
        assert not log.closed
        assert log.epoch == 0
        log.append(User(T0, "the turn goes on"))  # in epoch 0
        log.append(Assistant(T0, "yes", None, ()))
    finding = verify_session(home, "s1")
    assert finding.ok, finding.error
    with SessionStore(home).open("s1") as log:  # and a fold that fits still works
        _switch(log, "a short summary")
        assert log.epoch == 1


class _Fail:
    """Makes one os call fail with ENOSPC on its `nth` use whose path argument ends in `name`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, call: str, name: str) -> None:
        self.real = getattr(os, call)
        self.name = name
        self.fired = False
        monkeypatch.setattr(os, call, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.fired and any(str(a).endswith(self.name) for a in args[:2]):
            self.fired = True
            raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))
        return self.real(*args, **kwargs)


# (os call, the path it fails on, committed?) at every file step of the switch.
STEPS = [
    ("open", ".1.baseline.json.new", False),  # create the next baseline
    ("rename", ".1.baseline.json.new", False),  # put it in place
    ("open", ".1.jsonl.new", True),  # create the next log, after the commit
    ("rename", ".1.jsonl.new", True),  # put it in place
]


@pytest.mark.parametrize(("call", "name", "committed"), STEPS)
def test_a_file_error_in_the_switch_names_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, name: str, committed: bool
) -> None:
    home = tmp_path / "home"
    prepared(home, "s1")
    folder = home / "sessions" / "s1"
    with SessionStore(home).open("s1") as log:
        fail = _Fail(monkeypatch, call, name)
        with pytest.raises(SessionError) as got:
            _switch(log, "a summary")
        monkeypatch.undo()
        assert fail.fired
        message = str(got.value)
        assert str(folder / name) in message, message
        assert "ENOSPC" in message, message
        assert not (folder / name).exists()  # no hidden file left behind
        if committed:
            assert not isinstance(got.value, SwitchRefused)
            assert log.closed  # the worker lets go: the next open rolls forward
            with pytest.raises(SessionError):
                log.append(User(T0, "never after the epoch_end"))
        else:
            assert isinstance(got.value, SwitchRefused)
            assert not log.closed
            assert log.epoch == 0
            log.append(User(T0, "the turn goes on"))
    with SessionStore(home).open("s1") as log:  # rolled forward, or still epoch 0
        assert log.epoch == (1 if committed else 0)
        log.append(User(T0, "next turn"))
    finding = verify_session(home, "s1")
    assert finding.ok, finding.error


def test_nothing_is_appended_after_an_epoch_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roll-forward fails after the commit; the same open log object refuses every append,
    even if it were not closed (before: `turn_done` records after the `epoch_end`, a session
    nothing could open again)."""
    home = tmp_path / "home"
    prepared(home, "s1")
    folder = home / "sessions" / "s1"
    with SessionStore(home).open("s1") as log:
        close = log.close
        monkeypatch.setattr(log, "close", lambda: None)  # the store's own guard, alone
        monkeypatch.setattr(epoch_files, "roll_forward", _raise)
        with pytest.raises(SessionError, match="did not complete"):
            _switch(log, "a summary")
        monkeypatch.undo()
        size = (folder / "0.jsonl").stat().st_size
        for record in (User(T0, "x"), Assistant(T0, "y", None, ())):
            with pytest.raises(SessionError, match="closed by its epoch_end"):
                log.append(record)
        assert (folder / "0.jsonl").stat().st_size == size
        close()


def _raise(*_args: Any) -> Any:
    raise OSError(errno.EIO, "Input/output error", "somewhere")


@pytest.mark.parametrize("summary", ["short", "s" * 50_000])
def test_enospc_on_a_real_full_disk_names_the_file(tmp_path: Path, summary: str) -> None:
    """A real 64 KiB tmpfs filled up before the switch (the issue's ENOSPC): the error names
    the next baseline's file; epoch 0 is as it was; once there is room the switch works."""
    with small_disk(tmp_path / "disk") as disk:
        home = disk / "home"
        prepared(home, "s1")
        folder = home / "sessions" / "s1"
        before = (folder / "0.jsonl").read_bytes()
        with SessionStore(home).open("s1") as log:
            fill(disk)
            with pytest.raises(SwitchRefused) as got:
                _switch(log, summary)
            message = str(got.value)
            assert str(folder / ".1.baseline.json.new") in message, message
            assert "ENOSPC" in message, message
            assert (folder / "0.jsonl").read_bytes() == before
            assert not (folder / ".1.baseline.json.new").exists()
            free(disk)
            _switch(log, "short")
            assert log.epoch == 1
        assert verify_session(home, "s1").ok
