"""`recall`: one archived record of a folded epoch, read back exactly (issue 21).

A compaction folds the view, never the record: epoch n's log stays on disk byte for byte. The
model gets a folded record back by its epoch and sequence number (the baseline's "earlier in
this conversation" section says which ones were folded). This reads only the session's own
files, with the library's bounds (a regular file, no final symlink, at most `LOG_MAX_BYTES`),
and decodes the one line strictly; the chain was checked when the session was opened.

Every answer is text for the model, never an exception: an epoch or seq that does not exist, the
current epoch (its records are already in the conversation), a file that cannot be read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from boxmaker.proto import Assistant, EpochEnd, ResultClass, ToolResult, User
from boxmaker.proto.errors import RecordError
from boxmaker.proto.log import LogRecord, decode_line

from .epochs import log_name
from .errors import SessionError
from .files import open_regular, read_bounded
from .paths import LOG_MAX_BYTES


@dataclass(frozen=True, slots=True)
class Recalled:
    """What recall answers: the text, and the flags of the record it came from (a recalled
    untrusted tool result is still untrusted)."""

    content: str
    untrusted: bool = False
    class_: ResultClass = ResultClass.PUBLIC
    error: bool = False


def _error(text: str) -> Recalled:
    return Recalled(f"error: recall: {text}", error=True)


def _folded(current: int) -> str:
    if current == 0:
        return "this session has not been compacted: the whole conversation is above"
    last = current - 1
    return f"the folded epochs are {'0' if last == 0 else f'0 to {last}'}"


def recall(path: Path, current: int, epoch: int, seq: int) -> Recalled:
    """Record `seq` of epoch `epoch` of the session in folder `path`, whose current epoch is
    `current`."""
    if epoch < 0 or seq < 0:
        return _error("epoch and seq are numbers from 0")
    if epoch > current:
        return _error(f"there is no epoch {epoch}; {_folded(current)}")
    if epoch == current:
        return _error(
            f"epoch {epoch} is the current one: its records are already in the conversation "
            f"above; {_folded(current)}"
        )
    name = path / log_name(epoch)
    try:
        fd = open_regular(name)
        try:
            data = read_bounded(fd, LOG_MAX_BYTES, str(name))
        finally:
            os.close(fd)
    except (OSError, SessionError) as exc:
        return _error(f"cannot read epoch {epoch}'s log: {exc}")
    lines = data.splitlines(keepends=True)
    if seq >= len(lines):
        return _error(f"epoch {epoch} has records 0 to {len(lines) - 1}; there is no seq {seq}")
    try:
        entry = decode_line(lines[seq])
    except RecordError as exc:
        return _error(f"epoch {epoch}'s line {seq + 1} does not decode: {exc}")
    if entry.seq != seq:
        return _error(f"epoch {epoch}'s line {seq + 1} carries seq {entry.seq}")
    return _answer(epoch, seq, entry.record, lines[seq])


def _answer(epoch: int, seq: int, record: LogRecord, line: bytes) -> Recalled:
    where = f"[recalled: epoch {epoch}, seq {seq}, {record.TAG} of {record.time}"
    if type(record) is User:
        return Recalled(f"{where}: the owner's message]\n{record.content}")
    if type(record) is Assistant:
        calls = "".join(f"\n[called {c.name} {c.arguments}]" for c in record.tool_calls)
        return Recalled(f"{where}: the answer]\n{record.content or ''}{calls}")
    if type(record) is ToolResult:
        flags = ", untrusted" * record.untrusted + ", cut when recorded" * record.truncated
        head = f"{where}: the result of tool call {record.call}{flags}]"
        return Recalled(f"{head}\n{record.content}", record.untrusted, record.class_)
    if type(record) is EpochEnd:
        return Recalled(f"{where}: the summary that closed epoch {record.epoch}]\n{record.summary}")
    # session_start and the accounting records: the line itself is their whole content
    return Recalled(f"{where}]\n{line.decode().rstrip()}")
