"""The epochs of a session on disk: checking the chain across them, the switch, the roll-forward.

`<home>/sessions/<id>/` holds `<n>.baseline.json` and `<n>.jsonl` for epochs 0..k; the last one
is the current epoch, the one appends go to. The session's lock stays the flock on `0.jsonl`.
`epochs` holds the pure rules; this module reads and writes the files:

- `check_chain`: every epoch passes `check.check_session` with its own `prev` link, every epoch
  before the last ends with an `epoch_end`, and each next log starts with exactly the bytes
  `epochs.next_log` makes of the one before (so a tampering anywhere, or at a link, is named).
- `switch`: the switch itself, in this order, each step durable before the next:
  0. everything the next epoch needs is checked (`epochs.next_epoch_problem`: the baseline within
     its read bound, the kept tail well formed, the next log within its bound): a switch that
     could not complete is refused here (SwitchRefused), never committed (issue 29.1);
  1. `<n+1>.baseline.json` under a hidden name, fsynced, renamed into place (a crash here leaves
     epoch n as it was: with no `<n+1>.jsonl`, the file is not part of the session);
  2. the `epoch_end` append: the commit point;
  3. `roll_forward`: `<n+1>.jsonl` written under a hidden name, fsynced, renamed, folder fsynced;
  4. the open log moves to epoch n+1 (`SessionLog.enter_epoch`).
  A failure after the commit point closes the log (the store refuses any append after an
  `epoch_end`), so its worker lets go and the next open rolls the switch forward.
  Every file error names its file (issue 29.8).
- `open_current` (the store's `open`) rolls a committed switch forward first: the result is the
  same bytes as step 3 of a switch that never stopped, because `next_log` reads epoch n alone.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from boxmaker.proto import GENESIS_PREV, EpochEnd, SessionStart, User, sha256_hex
from boxmaker.proto.log import LogRecord

from . import crashpoint
from .baseline import BASELINE_MAX_BYTES, Baseline
from .check import CheckedLog, Finding, check_session
from .epochs import baseline_name, log_name, next_epoch_problem, next_log
from .errors import LogCorrupt, SessionError, SwitchRefused
from .files import (
    create_file,
    errno_name,
    fsync_dir,
    open_regular,
    read_bounded,
    read_regular,
    write_all,
)
from .paths import LOG_MAX_BYTES


class SessionLog(Protocol):
    """What `switch` needs of an open `store.SessionLog`."""

    session_id: str
    path: Path
    epoch: int
    link: str
    baseline: Baseline

    @property
    def log_path(self) -> Path: ...
    @property
    def next_link(self) -> str: ...
    @property
    def records(self) -> Sequence[LogRecord]: ...
    def append(self, record: LogRecord) -> None: ...
    def enter_epoch(
        self, epoch: int, fd: int, checked: CheckedLog, size: int, link: str
    ) -> None: ...
    def close(self) -> None: ...


_LOG_RE = re.compile(r"(0|[1-9][0-9]{0,8})\.jsonl")


def epoch_numbers(path: Path) -> list[int]:
    """The epochs whose log exists, 0..k.

    Raises:
        LogCorrupt: a gap (an epoch's log missing between two others).
    """
    found = sorted(int(m[1]) for name in os.listdir(path) if (m := _LOG_RE.fullmatch(name)))
    if found != list(range(len(found))):
        missing = sorted(set(range(max(found, default=0) + 1)) - set(found))
        raise LogCorrupt(f"{path}: the log of epoch {missing[0]} is missing between the others")
    return found


def compacted(path: Path) -> bool:
    """Whether the folder holds the log of an epoch after 0."""
    return any((m := _LOG_RE.fullmatch(name)) and m[1] != "0" for name in os.listdir(path))


@dataclass(frozen=True, slots=True)
class Epoch:
    """One checked epoch: its number, the prev its first line carries, its check, its size."""

    n: int
    link: str
    checked: CheckedLog
    size: int


def _read(path: Path) -> bytes:
    """An epoch's log: a regular file, no final symlink, read with its bound."""
    fd = open_regular(path)
    try:
        return read_bounded(fd, LOG_MAX_BYTES, str(path))
    finally:
        os.close(fd)


def _read_baseline(path: Path) -> bytes | None:
    return read_regular(path, BASELINE_MAX_BYTES)


def check_epoch(session_id: str, path: Path, n: int, link: str, data: bytes) -> CheckedLog:
    """`check_session` of epoch `n`'s log `data`, its first line linked to `link`."""
    base = path / baseline_name(n)
    return check_session(
        session_id,
        str(path / log_name(n)),
        data,
        str(base),
        _read_baseline(base),
        epoch=n,
        first_prev=link,
    )


def check_chain(session_id: str, path: Path, upto: int | None = None) -> list[Epoch]:
    """Checks every epoch (those before `upto` when given) and the links between them; returns
    them, the current one last.

    Raises:
        LogCorrupt: naming the file, the line and what is wrong.
    """
    out: list[Epoch] = []
    link = GENESIS_PREV
    numbers = epoch_numbers(path)[:upto]
    if not numbers:
        raise LogCorrupt(f"{path / log_name(0)}: missing; the session's folder holds no log")
    expected: bytes | None = None
    for n in numbers:
        data = _read(path / log_name(n))
        if expected is not None and not data.startswith(expected):
            raise LogCorrupt(
                f"{path / log_name(n)}: does not start with the session_start and kept turns "
                f"that the epoch_end of {log_name(n - 1)} makes (edited, or not this session's)"
            )
        checked = check_epoch(session_id, path, n, link, data)
        out.append(Epoch(n, link, checked, len(data)))
        end = checked.records[-1]
        if n == numbers[-1] and upto is None:
            break
        if type(end) is not EpochEnd:
            raise LogCorrupt(
                f"{path / log_name(n)}: epoch {n + 1} exists but this log does not end with an "
                "epoch_end (a line was cut or the next epoch's files were added)"
            )
        expected = next_log(session_id, checked.start.slot, checked.records, checked.next_prev)
        link = checked.next_prev
    return out


def current_epoch(session_id: str, path: Path) -> tuple[int, str]:
    """The current epoch and the prev its first line must carry, the epochs before it checked
    (`bxctl repair` works on the current epoch's log only; the others are closed).

    Raises:
        LogCorrupt: an epoch before the current one fails, or one is missing.
    """
    n = epoch_numbers(path)[-1] if compacted(path) else 0
    if n == 0:
        return 0, GENESIS_PREV
    last = check_chain(session_id, path, upto=n)[-1]
    return n, last.checked.next_prev


def _write_new(path: Path, name: str, data: bytes) -> None:
    """Writes `data` as `path/name` whole or not at all: a hidden name, fsync, rename, fsync.

    Raises:
        SessionError: naming the file (or the folder) and the step that failed; a hidden file
            left behind is removed.
    """
    tmp = path / f".{name}.new"
    step, where = "create", tmp
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # left by a crash
        fd = create_file(tmp)
        try:
            step = "write"
            write_all(fd, data)
            step = "fsync"
            os.fsync(fd)
        finally:
            os.close(fd)
        crashpoint.reached("epoch_file_written")
        step, where = f"rename to {path / name}", tmp
        os.rename(tmp, path / name)
        step, where = "fsync", path
        fsync_dir(path)
    except OSError as e:
        if where == tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise SessionError(
            f"{where}: {step} failed with {errno_name(e)} while writing {path / name}"
        ) from e
    crashpoint.reached("epoch_file_renamed")


def pending_problem(session_id: str, path: Path, last: Epoch) -> str | None:
    """Why the committed switch `last` ends with (its `epoch_end`, no next log yet) cannot roll
    forward, or None (issue 29.2: `bxctl verify` said ok while every turn failed). Never
    raises for what is on disk."""
    end = last.checked.records[-1]
    assert type(end) is EpochEnd
    base = path / baseline_name(last.n + 1)
    try:
        got = os.stat(base, follow_symlinks=False).st_size
    except FileNotFoundError:
        return f"{base}: missing, and the epoch_end of {log_name(last.n)} names it"
    except OSError as e:
        return f"{base}: cannot stat it: {errno_name(e)}"
    if got > BASELINE_MAX_BYTES:
        return f"{base}: {got:,} bytes, over its bound of {BASELINE_MAX_BYTES:,}"
    try:
        data = _read_baseline(base)
    except (SessionError, OSError) as e:
        return str(e) if isinstance(e, SessionError) else f"{base}: {errno_name(e)}"
    if data is None or sha256_hex(data) != end.baseline:
        return f"{base}: not the file the epoch_end of {log_name(last.n)} names (hash differs)"
    records = last.checked.records
    return next_epoch_problem(session_id, last.checked.start.slot, records, data, LOG_MAX_BYTES)


def roll_forward(session_id: str, path: Path, last: Epoch) -> Epoch:
    """Writes `<n+1>.jsonl` for the committed switch `last` ends with; returns the new epoch.

    Raises:
        LogCorrupt: the next baseline file is missing or not the one the epoch_end names.
    """
    end = last.checked.records[-1]
    assert type(end) is EpochEnd
    n = last.n + 1
    base = path / baseline_name(n)
    got = _read_baseline(base)
    if got is None or sha256_hex(got) != end.baseline:
        raise LogCorrupt(
            f"{base}: {'missing' if got is None else 'not the file'} the epoch_end of "
            f"{log_name(last.n)} names (hash {end.baseline}); the switch cannot be completed: "
            f"`bxctl repair {session_id}` rolls it back (the original kept)"
        )
    data = next_log(
        session_id, last.checked.start.slot, last.checked.records, last.checked.next_prev
    )
    _write_new(path, log_name(n), data)
    checked = check_epoch(session_id, path, n, last.checked.next_prev, data)
    return Epoch(n, last.checked.next_prev, checked, len(data))


def open_current(session_id: str, path: Path) -> tuple[Epoch, int]:
    """Checks the chain, rolls a committed switch forward, and opens the current epoch's log
    for appending; returns the epoch and the descriptor (-1 for epoch 0: the caller holds
    0.jsonl open and locked).

    Raises:
        LogCorrupt: as `check_chain` and `roll_forward`.
    """
    current = check_chain(session_id, path)[-1]
    if type(current.checked.records[-1]) is EpochEnd:
        current = roll_forward(session_id, path, current)
    if current.n == 0:
        return current, -1  # 0.jsonl: the caller's locked descriptor appends to it
    fd = open_regular(path / log_name(current.n), os.O_RDWR | os.O_APPEND)
    return current, fd


def switch(log: SessionLog, end: EpochEnd, baseline: Baseline) -> None:
    """Closes the log's epoch with `end` and moves the log into the next one, `baseline` its
    baseline (`end.baseline` must be its hash).

    Raises:
        ValueError: `end` does not fit the log (its epoch, its baseline hash).
        SwitchRefused: before the commit point: the next epoch could not open, or its baseline
            could not be written; epoch n is as it was, the log still open.
        SessionError: after the commit point (or the commit's append failed): the log is
            closed; the next open rolls the switch forward (or says why it cannot).
    """
    n = log.epoch
    if end.epoch != n or end.baseline != baseline.hash:
        raise ValueError("the epoch_end does not close this epoch with this baseline")
    data = baseline.to_bytes()
    start = log.records[0]
    assert type(start) is SessionStart
    after = (*log.records, end)
    if why := next_epoch_problem(log.session_id, start.slot, after, data, LOG_MAX_BYTES):
        raise SwitchRefused(f"{log.path / baseline_name(n + 1)}: not written: {why}")
    try:
        _write_new(log.path, baseline_name(n + 1), data)
    except SessionError as e:
        raise SwitchRefused(f"{e}; epoch {n} is as it was") from e
    crashpoint.reached("epoch_baseline_written")
    try:
        log.append(end)  # the commit point
        records = tuple(log.records)
        checked = CheckedLog(log.baseline, start, records, len(records), log.next_link)
        last = Epoch(n, log.link, checked, _size(log.log_path))
        new = roll_forward(log.session_id, log.path, last)
        fd = open_regular(log.path / log_name(new.n), os.O_RDWR | os.O_APPEND)
    except (OSError, SessionError) as e:
        # Its state is the files' now: let the worker go, so the next open rolls forward.
        log.close()
        what = e if isinstance(e, SessionError) else f"{e.filename}: {errno_name(e)}"
        raise SessionError(
            f"the switch to epoch {n + 1} did not complete ({what}); the log was closed and the "
            "next turn opens the session again, rolling the switch forward"
        ) from e
    log.enter_epoch(new.n, fd, new.checked, new.size, new.link)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as e:
        raise SessionError(f"{path}: cannot stat it: {errno_name(e)}") from e


def verify_epochs(session_id: str, path: Path) -> Finding:
    """`bxctl verify` for a session with more than one epoch: every epoch and every link."""
    log = str(path / log_name(0))
    try:
        chain = check_chain(session_id, path)
    except (SessionError, OSError) as e:  # LogCorrupt, NotARegularFile, unreadable
        return Finding(session_id, log, error=str(e))
    turns = 0
    for ep in chain:
        recs = ep.checked.records
        end = recs[-1]
        upto = end.keep_from if type(end) is EpochEnd else len(recs)
        turns += sum(1 for r in recs[:upto] if type(r) is User)
    last = chain[-1]
    return Finding(
        session_id,
        str(path / log_name(last.n)),
        records=sum(len(ep.checked.records) for ep in chain),
        turns=turns,
        started=chain[0].checked.start.time,
        last_activity=last.checked.records[-1].time,
        epochs=len(chain),
    )
