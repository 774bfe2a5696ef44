"""A turn the session's log already holds, by its client_ref (M4 section 6). [core]

A client that may deliver one message twice (gatewayd after a crash or a reconnect) names each
turn (`client_ref`, kept in the `User` record). When a `turn` comes whose client_ref the log
already holds, it is not run again: its tools may have run. `recorded_answer` reads what the log
shows of that turn:

- it finished (its last `assistant` has no tool calls): the answer, as the `turn_done` the first
  delivery got (the usage is the `usage` right after it; zeros when a compaction left the usage
  behind in the epoch before, since usage records stay with their epoch);
- anything else (cut by a crash or a kill, stopped, or ended by an error before an answer):
  `error{interrupted}`, saying that its tools may have run and the owner decides.

Only the open epoch is searched: a compaction copies the turns it keeps (`[compact] keep_turns`)
into the next epoch verbatim, their client_refs with them, so a turn recent enough to be
delivered again is there.
"""

from __future__ import annotations

from collections.abc import Sequence

from boxmaker.proto import (
    Assistant,
    EpochEnd,
    ErrorCode,
    TurnDone,
    TurnUsage,
    Usage,
    User,
    WireError,
)
from boxmaker.proto.log import LogRecord

INTERRUPTED_MESSAGE = (
    "this message was taken before but its turn was cut (loopd or the client stopped) before "
    "it answered; it was not run again, since its tools may have run. Send it again to ask anew"
)


def recorded_answer(records: Sequence[LogRecord], client_ref: str) -> TurnDone | WireError | None:
    """The answer to the turn named `client_ref` in `records` (a session's open epoch), or None
    when no turn of that name is there (then it is run)."""
    start = next(
        (i for i in range(len(records) - 1, -1, -1) if _ref(records[i]) == client_ref), None
    )
    if start is None:
        return None
    last: Assistant | None = None
    usage: Usage | None = None
    for record in records[start + 1 :]:
        if type(record) is User or type(record) is EpochEnd:
            break
        if type(record) is Assistant:
            last, usage = record, None
        elif type(record) is Usage and last is not None and usage is None:
            usage = record
        elif last is not None and type(record) is not Usage and not _accounting(record):
            last = None  # a tool result or a stop after the last completion: no answer yet
    if last is None or last.tool_calls:
        return WireError(ErrorCode.INTERRUPTED, INTERRUPTED_MESSAGE)
    if usage is None:
        return TurnDone(last.content, TurnUsage(0, 0, 0, 0, False))
    u = usage
    return TurnDone(
        last.content,
        TurnUsage(u.cache_n, u.prompt_n, u.predicted_n, u.reasoning_tokens, u.thinking_capped),
    )


def _ref(record: LogRecord) -> str | None:
    return record.client_ref if type(record) is User else None


def _accounting(record: LogRecord) -> bool:
    """Records that say how a completion went, not what the turn did (cache_loss, cache_*)."""
    return record.TAG in ("cache_loss", "cache_saved", "cache_restored")
