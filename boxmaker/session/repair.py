"""`bxctl repair`'s work: cut the last line off a session's log when it is the only fault,
keeping the original.

Two more repairs (issue 29.2, 29.3):

- A switch that cannot complete (the log ends with its `epoch_end`, or an old loopd appended
  turns after it, and the next baseline is missing, over its bound or not the one named): it is
  rolled back, since the next epoch cannot be built from files that are not there. The
  `epoch_end` is taken out (the turns after it re-chained in its place), the next baseline set
  aside, the original kept: the session is epoch n again and folds at its next chance. A current
  epoch n > 0 that is empty or a torn copy of what the switch writes is rebuilt from epoch n-1
  (`epochs.next_log` reads that alone).
- `--unanswered` (`take_unanswered`): the owner's messages at the end of the log that no answer
  followed (one too long for the model's context made every later turn fail) are taken out, the
  original kept.

Only the last line is ever cut otherwise, and only when every line before it verifies: torn (no
newline), damaged (a complete line that does not decode or chain) or duplicated (the line before,
twice).
Such a line was never acknowledged (torn.py says why). A log with no whole line at all (empty, or
its first line torn or damaged) held nothing ever acknowledged: its folder is set aside as
`sessions/.<id>.set-aside-<UTC time>`, so the id starts anew. Every other fault (a bad line
further up, a broken chain, a baseline that does not match) is refused: damage or tampering.

The session's flock is taken first, so a log open in loopd or a worker is never touched. In a
compacted session only the current epoch's log is repaired (the others end with their
`epoch_end` and are checked first). The original stays as `<epoch>.jsonl.<kind>-<UTC time>` (a
hard link to the same bytes, 0600); the cut log is written to a temporary file, fsynced, renamed
over `<epoch>.jsonl`, and the folder fsynced.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from boxmaker.proto import (
    GENESIS_PREV,
    EpochEnd,
    RecordError,
    SessionStart,
    User,
    encode_line,
    next_prev,
)
from boxmaker.proto.log_fast import verify_records

from . import epoch_files
from .baseline import BASELINE_MAX_BYTES
from .check import check_session
from .epochs import baseline_name, log_name, next_log
from .errors import LogCorrupt, RepairRefused, SessionError
from .files import (
    FILE_MODE,
    create_file,
    fsync_dir,
    open_regular,
    read_bounded,
    read_regular,
    write_all,
)
from .paths import LOG_MAX_BYTES, existing_session_dir, open_locked
from .torn import WHY, last_line, repairable_cut

ONLY_LAST = (
    "repair only cuts the last line, when the lines before it verify (torn, damaged or "
    "duplicated: a power cut's shapes)"
)


@dataclass(frozen=True, slots=True)
class Repaired:
    """What a repair did: the line it cut, its size, where the original is, what is left."""

    log: Path
    kept: Path  # the original, byte for byte
    line: int  # the cut line's number, from 1
    removed: int  # bytes cut
    records: int  # records left, all verified
    kind: str  # torn.TORN, DAMAGED or DUPLICATED; "" for an empty log
    set_aside: bool = False  # the whole folder was moved to `kept`: no whole line was left

    @property
    def why(self) -> str:
        return {**WHY, **_WHY}.get(self.kind, "empty")


def repair_session(home: Path, session_id: str, now: datetime | None = None) -> Repaired | None:
    """Cuts the log's faulty last line, or sets an empty session aside; None when the log
    verifies (nothing to repair).

    Raises:
        SessionIdError: a bad id, before anything is touched.
        NoSuchSession: the session's folder does not exist.
        SessionBusy: the log is open in loopd, a worker or another process.
        RepairRefused: the log has a fault other than its last line; nothing was changed.
        LogCorrupt, SessionError: the log is missing or the files cannot be read or written.
    """
    path = existing_session_dir(home, session_id)
    lock = open_locked(session_id, path)
    fd = -1
    try:
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        if (done := _repair_switch(session_id, path, stamp)) is not None:
            return done
        epoch, link = epoch_files.current_epoch(session_id, path)  # issue 21
        log_path = path / f"{epoch}.jsonl"
        base_path = str(path / baseline_name(epoch))
        fd = open_regular(log_path, os.O_RDWR) if epoch else lock
        data = read_bounded(fd, LOG_MAX_BYTES, str(log_path))
        base_data = read_regular(Path(base_path), BASELINE_MAX_BYTES)

        def check(log_data: bytes) -> int:
            args = (session_id, str(log_path), log_data, base_path, base_data)
            return len(check_session(*args, epoch=epoch, first_prev=link).records)

        try:
            check(data)
            return None
        except LogCorrupt as e:
            fault = str(e)
        cut = repairable_cut(
            session_id, str(log_path), data, base_path, base_data, epoch=epoch, first_prev=link
        )
        if epoch == 0 and (not data or (cut is not None and not cut.keep)):
            # Not one whole line: nothing in this session was ever acknowledged.
            aside = path.parent / f".{session_id}.set-aside-{stamp}"
            _set_aside(path, aside)
            line, kind = (cut.line, cut.kind) if cut else (0, "")
            return Repaired(log_path, aside, line, len(data), 0, kind, set_aside=True)
        if cut is None or not cut.keep:
            # A later epoch's first line is its SessionStart, written whole by the switch.
            last = last_line(data)
            also = "" if last is None else "; without its last line the log still fails"
            raise RepairRefused(f"{fault}{also}; {ONLY_LAST}: nothing was changed")
        records = check(data[: cut.keep])
        kept = path / f"{log_path.name}.{cut.kind}-{stamp}"
        _replace(fd, log_path, kept, data[: cut.keep])
        return Repaired(log_path, kept, cut.line, len(data) - cut.keep, records, cut.kind)
    finally:
        if fd >= 0 and fd != lock:
            os.close(fd)
        os.close(lock)


def _set_aside(path: Path, aside: Path) -> None:
    """Moves the session's folder to a hidden name (never an id), so the id can start anew."""
    try:
        os.rename(path, aside)
        fsync_dir(path.parent)
    except OSError as e:
        raise SessionError(f"{path}: cannot set it aside as {aside}: {e.strerror}") from e


def _replace(fd: int, log_path: Path, kept: Path, data: bytes) -> None:
    """Keeps the original under `kept`, then puts `data` in its place atomically."""
    folder = log_path.parent
    tmp = folder / f".{log_path.name}.{os.getpid()}.{secrets.token_hex(4)}.repair"
    try:
        os.fchmod(fd, FILE_MODE)  # the original keeps the session files' mode under its new name
        os.link(log_path, kept)
    except FileExistsError:
        raise SessionError(f"{kept} already exists; run repair again in a second") from None
    except OSError as e:
        raise SessionError(f"{kept}: cannot keep the original there: {e.strerror}") from e
    try:
        tfd = create_file(tmp)
        try:
            write_all(tfd, data)
            os.fsync(tfd)
        finally:
            os.close(tfd)
        os.rename(tmp, log_path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        with contextlib.suppress(OSError):
            os.unlink(kept)  # the log was not replaced: leave the folder as it was found
        raise SessionError(f"{log_path}: cannot write the repaired log: {e.strerror}") from e
    try:
        fsync_dir(folder)
    except OSError as e:
        raise SessionError(
            f"{folder}: the log was repaired but fsync of its folder failed: {e.strerror}"
        ) from e


UNFINISHED = "unfinished-switch"
REBUILT = "rebuilt"
UNANSWERED = "unanswered"
_WHY = {
    UNFINISHED: "an epoch_end whose switch cannot complete (the next baseline missing, over its "
    "bound or not the one it names): the switch was rolled back, the next baseline set aside",
    REBUILT: "the epoch's log was empty or a torn copy of what the switch writes: rebuilt from "
    "the epoch before",
    UNANSWERED: "the owner's messages at the end that no answer followed",
}


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    """What the switch repair would write: `data` as the current epoch's log, of this kind."""

    epoch: int
    kind: str  # UNFINISHED or REBUILT
    data: bytes
    line: int  # the epoch_end's line (UNFINISHED), else 0
    removed: int
    records: int
    why: str  # what is wrong, for verify


def plan_switch_repair(session_id: str, path: Path) -> SwitchPlan | None:
    """Read-only: a switch that cannot complete (rolled back), or an empty or torn epoch n > 0
    (rebuilt from epoch n-1); None when neither is the case.

    Raises:
        LogCorrupt, SessionError: an epoch before the current one fails, or a file cannot be read.
    """
    numbers = epoch_files.epoch_numbers(path)
    if not numbers:
        return None  # no log at all: the checks say so
    n = numbers[-1]
    log_path = path / log_name(n)
    fd = open_regular(log_path)
    try:
        data = read_bounded(fd, LOG_MAX_BYTES, str(log_path))
    finally:
        os.close(fd)
    link = GENESIS_PREV
    if n > 0:
        before = epoch_files.check_chain(session_id, path, upto=n)[-1]
        recs = before.checked.records
        expected = next_log(session_id, before.checked.start.slot, recs, before.checked.next_prev)
        if len(data) < len(expected) and expected.startswith(data):  # empty, or torn in it
            what = "empty" if not data else f"a torn copy ({len(data)} of {len(expected)} bytes)"
            why = f"{log_path}: {what} of what the switch to epoch {n} writes"
            return SwitchPlan(n, REBUILT, expected, 0, 0, len(_lines(expected)), why)
        link = before.checked.next_prev
    if b'{"type":"epoch_end",' not in data:
        return None  # no switch in it (every line starts with its type): the common case, fast
    try:
        records, _ = verify_records(data, link)
    except RecordError:
        return None  # a torn or damaged line: the last-line repair's case
    ends = [i for i, r in enumerate(records) if type(r) is EpochEnd]
    if not ends or not records or type(records[0]) is not SessionStart:
        return None
    at = ends[0]
    lines = _lines(data)
    if at == len(records) - 1:  # the log ends with it: can it roll forward?
        checked = epoch_files.check_epoch(session_id, path, n, link, data)
        problem = epoch_files.pending_problem(
            session_id, path, epoch_files.Epoch(n, link, checked, len(data))
        )
        if problem is None:
            return None  # the next open rolls it forward
        why = f"the switch to epoch {n + 1} cannot complete: {problem}"
    else:
        why = (
            f"{log_path}: line {at + 1}: an epoch_end with {len(records) - at - 1} records after "
            "it (a switch that did not complete, and turns appended after it)"
        )
    # Take the epoch_end out; the lines after it (an old loopd's) follow in its place.
    out = bytearray(b"".join(lines[:at]))
    prev = next_prev(lines[at - 1]) if at else link
    for seq, record in enumerate(records[at + 1 :], start=at):
        line = encode_line(record, seq, prev)
        out += line
        prev = next_prev(line)
    return SwitchPlan(n, UNFINISHED, bytes(out), at + 1, len(lines[at]), len(records) - 1, why)


def _repair_switch(session_id: str, path: Path, stamp: str) -> Repaired | None:
    plan = plan_switch_repair(session_id, path)
    if plan is None:
        return None
    log_path = path / log_name(plan.epoch)
    if plan.kind == UNFINISHED:
        base = path / baseline_name(plan.epoch + 1)
        if os.path.lexists(base):
            os.rename(base, path / f"{base.name}.{UNFINISHED}-{stamp}")
    fd = open_regular(log_path, os.O_RDWR)
    try:
        kept = path / f"{log_path.name}.{plan.kind}-{stamp}"
        _replace(fd, log_path, kept, plan.data)
    finally:
        os.close(fd)
    return Repaired(log_path, kept, plan.line, plan.removed, plan.records, plan.kind)


def take_unanswered(home: Path, session_id: str, now: datetime | None = None) -> Repaired:
    """Takes the owner's messages that no answer followed off the end of the current epoch's log
    (`bxctl repair --unanswered`), keeping the original.

    Raises:
        RepairRefused: the log does not verify, or does not end with such a message.
        SessionBusy, NoSuchSession, SessionError: as `repair_session`.
    """
    path = existing_session_dir(home, session_id)
    lock = open_locked(session_id, path)
    fd = -1
    try:
        epoch, link = epoch_files.current_epoch(session_id, path)
        log_path = path / log_name(epoch)
        fd = open_regular(log_path, os.O_RDWR) if epoch else lock
        data = read_bounded(fd, LOG_MAX_BYTES, str(log_path))
        base_path = str(path / baseline_name(epoch))
        base_data = read_regular(Path(base_path), BASELINE_MAX_BYTES)
        try:
            checked = check_session(
                session_id, str(log_path), data, base_path, base_data, epoch=epoch, first_prev=link
            )
        except LogCorrupt as e:
            raise RepairRefused(f"{e}; run `bxctl repair {session_id}` first") from None
        records = checked.records
        first = len(records)
        while first > 1 and type(records[first - 1]) is User:
            first -= 1
        if first == len(records):
            raise RepairRefused(
                f"{log_path}: its last record is not a message of the owner's without an answer; "
                "nothing was changed"
            )
        lines = _lines(data)
        keep = sum(len(line) for line in lines[:first])
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        kept = path / f"{log_path.name}.{UNANSWERED}-{stamp}"
        _replace(fd, log_path, kept, data[:keep])
        return Repaired(log_path, kept, first + 1, len(data) - keep, first, UNANSWERED)
    finally:
        if fd >= 0 and fd != lock:
            os.close(fd)
        os.close(lock)
