"""Checking a session's two files, as bytes: the verdict `store.open` and `bxctl verify` share.
[core]

A log is refused, and nothing is repaired, when:
- its last line is incomplete, or any line does not decode, breaks the `prev` chain, or skips or
  repeats a `seq` (`proto.log.verify_log`'s verdict, reached faster on a good log by
  `proto.log_fast.verify_records`; the first failing line named);
- it is empty, its first line is not the `session_start` of this session in this epoch (whose
  `prev` is GENESIS_PREV in epoch 0, else the hash of the `epoch_end` that closed the epoch
  before), a later line is a second `session_start`, or an `epoch_end` is not the last line or
  does not close this epoch (`epochs.end_problem`);
- the baseline file is missing, does not hash to what `session_start.baseline` records, or does
  not read back as a baseline.

What the chain cannot prove: that nothing is missing after the last line (a log cut at a line
boundary verifies), or that the log was not rewritten from some line on with every later hash
recomputed. Only a copy of the last line's hash kept elsewhere would catch those.
"""

from __future__ import annotations

from dataclasses import dataclass

from boxmaker.proto import GENESIS_PREV, RecordError, SessionStart, User, sha256_hex
from boxmaker.proto.log import LogRecord
from boxmaker.proto.log_fast import verify_records

from .baseline import Baseline
from .epochs import end_problem
from .errors import BaselineError, LogCorrupt


@dataclass(frozen=True, slots=True)
class CheckedLog:
    """A log that passed every check, and where the next line continues it."""

    baseline: Baseline
    start: SessionStart
    records: tuple[LogRecord, ...]
    next_seq: int
    next_prev: str


def check_session(
    session_id: str,
    log_name: str,
    log_data: bytes,
    baseline_name: str,
    baseline_data: bytes | None,
    *,
    epoch: int = 0,
    first_prev: str = GENESIS_PREV,
) -> CheckedLog:
    """Checks a session's log and baseline file of one epoch.

    Args:
        log_name, baseline_name: the files' paths, for the messages.
        baseline_data: the baseline file's bytes, or None when it does not exist.
        epoch, first_prev: the epoch, and the prev its first line must carry.

    Raises:
        LogCorrupt: "<file>: line N: what is wrong", or "<file>: what is wrong".
    """
    try:
        listed, next_prev = verify_records(log_data, first_prev)
    except RecordError as e:
        raise LogCorrupt(f"{log_name}: {e}") from None
    records = tuple(listed)
    if not records:
        raise LogCorrupt(f"{log_name}: empty; a log starts with its session_start line")
    start = records[0]
    if not isinstance(start, SessionStart):
        raise LogCorrupt(f"{log_name}: line 1: a {start.TAG} line; a log starts with session_start")
    if start.session != session_id:
        raise LogCorrupt(
            f"{log_name}: line 1: session_start is for session {start.session!r}, "
            f"not {session_id!r} (the folder was renamed or the log copied)"
        )
    if start.epoch != epoch:
        raise LogCorrupt(
            f"{log_name}: line 1: session_start has epoch {start.epoch}; this file is {epoch}"
        )
    for n, record in enumerate(records[1:], start=2):
        if type(record) is SessionStart:
            raise LogCorrupt(f"{log_name}: line {n}: a second session_start")
    if (why := end_problem(records, epoch)) is not None:
        raise LogCorrupt(f"{log_name}: {why}")
    if baseline_data is None:
        raise LogCorrupt(f"{baseline_name}: missing; line 1 of {log_name} names its hash")
    got = sha256_hex(baseline_data)
    if got != start.baseline:
        raise LogCorrupt(
            f"{baseline_name}: its SHA-256 is {got}, but line 1 of {log_name} (session_start) "
            f"records {start.baseline}: the baseline file was changed after the session started"
        )
    try:
        baseline = Baseline.from_bytes(baseline_data, baseline_name)
    except BaselineError as e:
        raise LogCorrupt(str(e)) from None
    return CheckedLog(baseline, start, records, len(records), next_prev)


@dataclass(frozen=True, slots=True)
class Finding:
    """What `bxctl verify` reports about one session: the counts, or the error."""

    session_id: str
    log: str
    records: int = 0
    turns: int = 0  # user messages
    started: str | None = None
    last_activity: str | None = None  # the time of the last line
    error: str | None = None
    epochs: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None

    def line(self) -> str:
        """One line for a person: `ok: ...` or `FAILED: ...`."""
        if self.error is not None:
            return f"FAILED: session {self.session_id}: {self.error}"
        epochs = f" in {self.epochs} epochs" if self.epochs > 1 else ""
        return (
            f"ok: session {self.session_id}: {self.records} records{epochs}, {self.turns} turns, "
            f"started {self.started}, last activity {self.last_activity} ({self.log})"
        )


def finding(session_id: str, log_name: str, checked: CheckedLog) -> Finding:
    records = checked.records
    return Finding(
        session_id,
        log_name,
        records=len(records),
        turns=sum(1 for r in records if type(r) is User),
        started=checked.start.time,
        last_activity=records[-1].time,
    )
