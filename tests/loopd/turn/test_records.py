"""turn/records.py: one place for each conversion between completions, records and the channel."""

from __future__ import annotations

from boxmaker.loopd.llama.types import Completion, FinishReason
from boxmaker.loopd.turn.records import (
    assistant_message,
    cache_loss,
    cache_loss_event,
    completion_records,
    turn_usage,
    usage_timings,
)
from boxmaker.proto import (
    Assistant,
    AssistantMessage,
    CacheLoss,
    CacheLossEvent,
    Timings,
    ToolCall,
    TurnUsage,
    Usage,
)

T = "2026-11-30T12:00:00.000Z"
CALL = ToolCall("c1", "clock", "{ }")


def completion(cache_n: int = 0, prompt_n: int = 100, predicted_n: int = 20) -> Completion:
    return Completion(
        "id", None, "hmm", (CALL,), FinishReason.TOOL_CALLS,
        Timings(cache_n, prompt_n, predicted_n), 7, True,
    )  # fmt: skip


def test_completion_to_message_and_records_keep_the_three_fields_exactly() -> None:
    c = completion()
    assert assistant_message(c) == AssistantMessage(None, "hmm", (CALL,))
    assert completion_records(c, T) == (
        Assistant(T, None, "hmm", (CALL,)),
        Usage(T, 0, 100, 20, 7, True),
    )


def test_usage_to_turn_usage_and_timings() -> None:
    u = Usage(T, 1, 2, 3, 4, False)
    assert turn_usage(u) == TurnUsage(1, 2, 3, 4, False)
    assert usage_timings(u) == Timings(1, 2, 3)


def test_cache_loss_is_more_than_64_short_of_the_previous_total() -> None:
    before = Usage(T, 0, 100, 20, 0, False)  # the slot held 120 tokens after it
    assert cache_loss(None, completion(0), T) is None  # the session's first completion
    assert cache_loss(before, completion(120), T) is None
    assert cache_loss(before, completion(56), T) is None  # 64 short: still a hit
    loss = cache_loss(before, completion(55), T)
    assert loss == CacheLoss(T, 120, 55)
    assert cache_loss_event(loss) == CacheLossEvent(120, 55)
