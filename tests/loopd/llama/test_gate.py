"""boxmaker.loopd.llama.gate: the SlotQueue core (instant), then SlotGate through the gate kit.

The kit (tests/support/loopd/check_gate.py) runs every `Gate` check with real threads; it is run
here on `SlotGate`, and on broken gates to show that it can fail.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from boxmaker.loopd.llama.errors import Busy
from boxmaker.loopd.llama.gate import Gate, SlotGate, SlotQueue, Ticket
from boxmaker.loopd.llama.types import OnEvent
from tests.support.loopd import check_gate
from tests.support.loopd.check_gate import CHECKS, GateMaker, GateSide

# ---- the core ----


def test_first_comer_holds_at_once_others_queue_in_order() -> None:
    q = SlotQueue(0, 8)
    a, b, c = Ticket(), Ticket(), Ticket()
    assert q.arrive(a) == 0
    assert q.holder is a
    assert q.arrive(b) == 1
    assert q.arrive(c) == 2
    assert not q.try_enter(c)  # not first in line
    assert not q.try_enter(b)  # first, but the slot is held
    q.leave(a)
    assert not q.try_enter(c)  # FIFO: b goes first even if c asks first
    assert q.try_enter(b)
    assert q.ahead(c) == 1
    q.leave(b)
    assert q.try_enter(c)
    assert q.try_enter(c)  # asking again while holding is harmless


def test_queue_length_counts_waiters_not_the_holder() -> None:
    q = SlotQueue(3, 2)
    q.arrive(Ticket())
    q.arrive(Ticket())
    q.arrive(Ticket())
    with pytest.raises(
        Busy, match=r"slot 3 is busy and 2 requests are already waiting .*queue_length = 2"
    ):
        q.arrive(Ticket())
    assert len(q.waiting) == 2


def test_queue_length_zero_means_no_waiting() -> None:
    q = SlotQueue(0, 0)
    q.arrive(Ticket())
    with pytest.raises(Busy):
        q.arrive(Ticket())


def test_a_waiter_leaving_moves_the_others_up() -> None:
    q = SlotQueue(0, 8)
    holder, a, b = Ticket(), Ticket(), Ticket()
    q.arrive(holder)
    q.arrive(a)
    q.arrive(b)
    q.leave(a)
    q.leave(a)  # twice: nothing
    assert q.ahead(b) == 1
    q.leave(holder)
    assert q.try_enter(b)


def test_a_slot_freed_while_others_wait_is_not_taken_by_a_newcomer() -> None:
    q = SlotQueue(0, 8)
    holder, waiter, newcomer = Ticket(), Ticket(), Ticket()
    q.arrive(holder)
    q.arrive(waiter)
    q.leave(holder)  # the waiter has not woken yet
    assert q.arrive(newcomer) == 1  # behind the waiter, not in front
    assert q.try_enter(waiter)


# ---- the shell, through the kit ----


@contextmanager
def slot_gate(queue_length: int) -> Iterator[GateSide]:
    gate = SlotGate(queue_length)
    yield lambda: gate


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_slot_gate_passes_the_gate_kit(check: Callable[[GateMaker], None]) -> None:
    check(slot_gate)


# ---- the kit fails on gates that break a rule ----


class _Unbounded:
    """Queues without limit: never Busy."""

    def __init__(self, queue_length: int) -> None:
        self.inner = SlotGate(queue_length + 1)

    def hold(self, slot: int, on_event: OnEvent) -> contextlib.AbstractContextManager[None]:
        return self.inner.hold(slot, on_event)


class _Silent:
    """Never says Queued."""

    def __init__(self, queue_length: int) -> None:
        self.inner = SlotGate(queue_length)

    def hold(self, slot: int, on_event: OnEvent) -> contextlib.AbstractContextManager[None]:
        return self.inner.hold(slot, lambda event: None)


def _maker(cls: Callable[[int], Gate]) -> GateMaker:
    @contextmanager
    def make(queue_length: int) -> Iterator[GateSide]:
        gate = cls(queue_length)
        yield lambda: gate

    return make


@pytest.mark.parametrize(
    ("broken", "check", "says"),
    [
        (_Unbounded, check_gate.check_busy_when_the_line_is_full, "a full line answered"),
        (_Unbounded, check_gate.check_queue_length_zero_refuses_any_wait, "queue_length 0"),
        (_Silent, check_gate.check_fifo_order_and_queued_counts, "to be told it is 1"),
    ],
)
def test_the_kit_catches_a_broken_gate(
    broken: Callable[[int], Gate],
    check: Callable[[GateMaker], None],
    says: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(check_gate, "BOUND_S", 0.3)  # each of these fails on a wait
    with pytest.raises(AssertionError, match=says):
        check(_maker(broken))
