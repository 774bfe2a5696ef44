"""boxmaker.loopd.llama.waits: the first-byte wait and the thinking cap, decided with an injected
`now`. Instant: each test walks a sequence of polls."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from boxmaker.loopd.llama.errors import LoadTimeout, Stalled, WaitTimeout
from boxmaker.loopd.llama.waits import (
    FirstByteWait,
    SlotView,
    Thinking,
    ThinkingGuard,
    WaitLimits,
)

BUSY, IDLE, DOWN = SlotView.BUSY, SlotView.IDLE, SlotView.UNAVAILABLE
# The brief's defaults: 10 min busy, 3 min load, 30 s idle; polls every 5 s.
LIMITS = WaitLimits(busy_wait_ms=600_000, load_wait_ms=180_000, idle_grace_ms=30_000)
T0 = 1000.0


def walk(polls: Sequence[tuple[float, SlotView]]) -> list[object]:
    """Feeds (seconds after the send, view) polls; returns each verdict (None: wait on)."""
    wait = FirstByteWait(LIMITS, 0, T0)
    return [wait.observe(T0 + t, view, "HTTP 503: Loading model") for t, view in polls]


def every_5s(view: SlotView, until: float, start: float = 5) -> list[tuple[float, SlotView]]:
    t, out = start, []
    while t <= until:
        out.append((t, view))
        t += 5
    return out


def test_busy_slot_waits_ten_minutes_then_wait_timeout() -> None:
    verdicts = walk(every_5s(BUSY, 600))
    assert verdicts[:-1] == [None] * (len(verdicts) - 1)
    assert isinstance(verdicts[-1], WaitTimeout)
    assert "slot 0 stayed busy for 600000 ms" in str(verdicts[-1])
    assert "busy_wait_ms = 600000" in str(verdicts[-1])


def test_unavailable_waits_three_minutes_then_load_timeout_with_the_last_answer() -> None:
    verdicts = walk(every_5s(DOWN, 180))
    assert verdicts[:-1] == [None] * 35
    assert isinstance(verdicts[-1], LoadTimeout)
    assert "for 180000 ms (load_wait_ms = 180000); last /slots: HTTP 503: Loading model" in str(
        verdicts[-1]
    )


def test_idle_slot_gives_thirty_seconds_then_stalled() -> None:
    verdicts = walk(every_5s(IDLE, 30))
    assert verdicts[:-1] == [None] * 5
    assert isinstance(verdicts[-1], Stalled)
    assert "idle_grace_ms = 30000" in str(verdicts[-1])


def test_the_first_run_counts_from_the_send() -> None:
    # The first poll comes late (a slow /slots), already past the idle grace.
    assert isinstance(walk([(31, IDLE)])[0], Stalled)


def test_a_change_starts_a_new_run_at_the_poll_that_saw_it() -> None:
    # Loading for 170 s, then busy: the busy limit counts from 175 s, not from the send.
    polls = every_5s(DOWN, 170) + every_5s(BUSY, 775, start=175)
    verdicts = walk(polls)
    assert all(v is None for v in verdicts[:-1])
    assert isinstance(verdicts[-1], WaitTimeout)
    assert "stayed busy for 600000 ms" in str(verdicts[-1])


def test_idle_then_busy_then_idle_restarts_the_grace() -> None:
    polls = [(5, IDLE), (25, IDLE), (30, BUSY), (35, IDLE), (60, IDLE), (65, IDLE)]
    verdicts = walk(polls)
    assert verdicts[:5] == [None] * 5  # the idle run since 35 s is 25 s long at 60 s
    assert isinstance(verdicts[5], Stalled)


def test_alternating_views_are_bounded_by_busy_plus_load() -> None:
    polls = [(t, BUSY if (t // 5) % 2 else IDLE) for t in range(5, 800, 5)]
    verdicts = walk(polls)
    first = next(i for i, v in enumerate(verdicts) if v is not None)
    assert polls[first][0] == 780  # 600 s + 180 s
    assert isinstance(verdicts[first], WaitTimeout)
    assert "busy_wait_ms + load_wait_ms = 780000" in str(verdicts[first])


def test_short_limits_as_the_timing_tests_use_them() -> None:
    wait = FirstByteWait(WaitLimits(200, 150, 100), 1, 0.0)
    assert wait.observe(0.05, BUSY) is None
    assert wait.observe(0.15, BUSY) is None
    assert isinstance(wait.observe(0.2, BUSY), WaitTimeout)


# ---- the thinking cap ----


def test_cap_then_overrun_after_the_grace() -> None:
    guard = ThinkingGuard(cap=4096, overrun=256)
    assert guard.check(4095) is Thinking.GO_ON
    assert guard.check(4096) is Thinking.CAP
    assert guard.check(4100) is Thinking.CAP  # until capped() says reasoning_end was accepted
    guard.capped(4100)
    assert guard.check(4100 + 255) is Thinking.GO_ON
    assert guard.check(4100 + 256) is Thinking.OVERRUN


@pytest.mark.parametrize(("more", "verdict"), [(0, Thinking.GO_ON), (1, Thinking.OVERRUN)])
def test_overrun_zero_allows_no_more_reasoning(more: int, verdict: Thinking) -> None:
    guard = ThinkingGuard(cap=10, overrun=0)
    guard.capped(10)
    assert guard.check(10 + more) is verdict
