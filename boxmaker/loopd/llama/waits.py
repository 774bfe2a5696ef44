"""The rules of one request's waits and of the thinking cap, as small state machines. [core]

`llama.chat` owns the socket and the clock and calls these with what it saw; they decide. Time is
a parameter (`now`, in seconds from any monotonic clock), so every rule has instant tests.

**Before the first byte** (M2a brief, section 4, step 2). Reads time out every `poll_ms`; after
each timeout the chat loop asks `/slots` and reports what it found to `FirstByteWait.observe`:

- `BUSY` (our slot is processing): keep waiting while it has been busy for less than
  `busy_wait_ms`, then `WaitTimeout`;
- `UNAVAILABLE` (/slots failed or answered 503: loading, restarting): keep waiting while that has
  lasted less than `load_wait_ms`, then `LoadTimeout`;
- `IDLE` (the slot is idle and still no byte): keep waiting while that has lasted less than
  `idle_grace_ms`, then `Stalled`.

"Has lasted" counts from the start of the run of polls that saw the same thing: the first run
starts when the request was sent (nothing was seen before it), a later run at the poll that first
saw the change. So a model that loads for a minute and then finds the slot busy gets both limits
in turn. Runs that keep alternating cannot go on for ever: the whole wait never passes
`busy_wait_ms + load_wait_ms` (a load, then a busy slot: the longest wait that makes sense);
past that it is a `WaitTimeout`.

**The thinking cap** (step 4). `ThinkingGuard.check(reasoning_tokens)` says when to post
`reasoning_end` (the count reached `thinking_cap`) and when reasoning has overrun (it went on
for `thinking_overrun` more tokens after the cap; with an overrun of 0, any more is an overrun).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from boxmaker.loopd.config import InferenceConfig
from boxmaker.loopd.llama.errors import InferError, LoadTimeout, Stalled, WaitTimeout


class SlotView(enum.Enum):
    """What one /slots poll said about our slot."""

    BUSY = "busy"
    IDLE = "idle"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class WaitLimits:
    busy_wait_ms: int
    load_wait_ms: int
    idle_grace_ms: int

    @classmethod
    def from_config(cls, config: InferenceConfig) -> WaitLimits:
        return cls(config.busy_wait_ms, config.load_wait_ms, config.idle_grace_ms)


class FirstByteWait:
    """Decides, poll by poll, whether a request still waiting for its first byte waits on."""

    def __init__(self, limits: WaitLimits, slot: int, started: float) -> None:
        """Args:
        limits: the three limits.
        slot: the slot id, for messages.
        started: when the request was sent (seconds, monotonic).
        """
        self._limits = limits
        self._slot = slot
        self._started = started
        self._view: SlotView | None = None
        self._since = started  # the start of the current run

    def observe(self, now: float, view: SlotView, detail: str = "") -> InferError | None:
        """Records one poll at `now`. Returns the error that ends the wait, or None to go on.

        `detail` (e.g. the failed /slots answer) goes into a LoadTimeout's message.
        """
        if view is not self._view:
            # A -> B: the run of B starts at this poll (the first run at the send).
            self._since = self._started if self._view is None else now
            self._view = view
        run_ms = round((now - self._since) * 1000)
        total_ms = round((now - self._started) * 1000)
        lim = self._limits
        if view is SlotView.BUSY and run_ms >= lim.busy_wait_ms:
            return WaitTimeout(
                f"slot {self._slot} stayed busy for {run_ms} ms with no byte of our response "
                f"(busy_wait_ms = {lim.busy_wait_ms})"
            )
        if view is SlotView.UNAVAILABLE and run_ms >= lim.load_wait_ms:
            why = f"; last /slots: {detail}" if detail else ""
            return LoadTimeout(
                f"the server stayed unavailable (loading or restarting) for {run_ms} ms "
                f"(load_wait_ms = {lim.load_wait_ms}){why}"
            )
        if view is SlotView.IDLE and run_ms >= lim.idle_grace_ms:
            return Stalled(
                f"slot {self._slot} is idle but no byte of the response came for {run_ms} ms "
                f"(idle_grace_ms = {lim.idle_grace_ms})"
            )
        if total_ms >= lim.busy_wait_ms + lim.load_wait_ms:
            return WaitTimeout(
                f"no byte of the response in {total_ms} ms while the slot kept changing "
                f"(busy_wait_ms + load_wait_ms = {lim.busy_wait_ms + lim.load_wait_ms})"
            )
        return None


class Thinking(enum.Enum):
    GO_ON = "go_on"
    CAP = "cap"  # post reasoning_end now
    OVERRUN = "overrun"  # close the connection: ThinkingOverrun


class ThinkingGuard:
    """Watches the reasoning token count of one request."""

    def __init__(self, cap: int, overrun: int) -> None:
        self.cap = cap
        self.overrun = overrun
        self.capped_at: int | None = None  # the count when reasoning_end was posted

    def check(self, reasoning_tokens: int) -> Thinking:
        """What to do now that `reasoning_tokens` reasoning tokens have streamed.

        CAP is returned until the caller calls `capped()`, once reasoning_end was accepted.
        """
        if self.capped_at is None:
            return Thinking.CAP if reasoning_tokens >= self.cap else Thinking.GO_ON
        more = reasoning_tokens - self.capped_at
        return Thinking.OVERRUN if more >= max(self.overrun, 1) else Thinking.GO_ON

    def capped(self, reasoning_tokens: int) -> None:
        self.capped_at = reasoning_tokens
