"""One home for each conversion between a completion, the log's records and the channel. [core]

- Completion -> AssistantMessage: what a request carries for an earlier completion (the self-test's
  turn 2, the chat preview, the turn loop through replay).
- Completion -> Assistant + Usage: what the log keeps for one completion, the three message fields
  exactly as the server returned them.
- Usage -> Timings (for the cache rule) and Usage -> TurnUsage (the channel's `turn_done`).
- CacheLoss: the record (and its event) when `cache_outcome` reports a loss against the session's
  previous completion.
"""

from __future__ import annotations

from boxmaker.loopd.llama.info import CacheHit, cache_outcome
from boxmaker.loopd.llama.types import Completion
from boxmaker.proto import (
    Assistant,
    AssistantMessage,
    CacheLoss,
    CacheLossEvent,
    Timings,
    TurnUsage,
    Usage,
)


def assistant_message(c: Completion) -> AssistantMessage:
    """The completion as the assistant message a later request carries."""
    return AssistantMessage(c.content, c.reasoning_content, c.tool_calls)


def assistant_record(c: Completion, time: str) -> Assistant:
    return Assistant(time, c.content, c.reasoning_content, c.tool_calls)


def usage_record(c: Completion, time: str) -> Usage:
    t = c.timings
    return Usage(time, t.cache_n, t.prompt_n, t.predicted_n, c.reasoning_tokens, c.thinking_capped)


def completion_records(c: Completion, time: str) -> tuple[Assistant, Usage]:
    """The two records of one completion, Usage right after Assistant."""
    return assistant_record(c, time), usage_record(c, time)


def usage_timings(u: Usage) -> Timings:
    """The token counts a Usage record kept: what the cache rule compares."""
    return Timings(u.cache_n, u.prompt_n, u.predicted_n)


def turn_usage(u: Usage) -> TurnUsage:
    """The last Usage record of a turn as `turn_done` carries it (its time left out)."""
    return TurnUsage(u.cache_n, u.prompt_n, u.predicted_n, u.reasoning_tokens, u.thinking_capped)


def cache_loss(previous: Usage | None, current: Completion, time: str) -> CacheLoss | None:
    """The CacheLoss record when `current` lost the cache `previous` (the session's completion
    before it, in any turn) left; None for a hit or the session's first completion."""
    if previous is None:
        return None
    outcome = cache_outcome(usage_timings(previous), current.timings)
    if isinstance(outcome, CacheHit):
        return None
    return CacheLoss(time, outcome.expected, outcome.got)


def cache_loss_event(record: CacheLoss) -> CacheLossEvent:
    return CacheLossEvent(record.expected, record.got)
