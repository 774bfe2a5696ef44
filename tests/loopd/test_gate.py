"""boxmaker.loopd.llama.gate: the SlotQueue core (instant), then SlotGate with real threads.

The thread tests never sleep to let something happen: each step waits on a threading.Event or
a condition with a bound, and the gate's own state is read through `waiting()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from boxmaker.loopd.llama.errors import Busy
from boxmaker.loopd.llama.gate import SlotGate, SlotQueue, Ticket
from boxmaker.proto import QueuedEvent

BOUND_S = 5.0


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


# ---- the shell, with threads ----


class Runner:
    """Runs gate.hold(slot) on a thread; the body waits for `release`."""

    def __init__(self, gate: SlotGate, name: str, order: list[str], slot: int = 0) -> None:
        self.events: list[QueuedEvent] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(gate, name, order, slot))

    def _run(self, gate: SlotGate, name: str, order: list[str], slot: int) -> None:
        try:
            with gate.hold(slot, self.events.append):  # type: ignore[arg-type]
                order.append(name)
                self.entered.set()
                assert self.release.wait(BOUND_S), "never released"
        except BaseException as exc:
            self.error = exc

    def start(self) -> Runner:
        self.thread.start()
        return self

    def finish(self) -> None:
        self.release.set()
        self.thread.join(BOUND_S)
        assert not self.thread.is_alive()


def wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not cond():
        assert time.monotonic() < deadline, f"waited {BOUND_S} s for {what}"
        time.sleep(0.002)  # polling a condition with a bound, not a sleep that hopes


def test_fifo_with_threads_and_queued_events() -> None:
    gate = SlotGate(queue_length=8)
    order: list[str] = []
    first = Runner(gate, "first", order).start()
    assert first.entered.wait(BOUND_S)
    waiters = []
    for i, name in enumerate(["second", "third", "fourth"]):
        waiters.append(Runner(gate, name, order).start())
        wait_for(lambda n=i + 1: gate.waiting(0) == n, f"{name} to queue")  # type: ignore[misc]
    first.finish()
    for i, runner in enumerate(waiters):
        assert runner.entered.wait(BOUND_S)
        # Let those behind see their new place before the line moves again.
        for j, behind in enumerate(waiters[i + 1 :], start=1):
            wait_for(
                lambda b=behind, n=j: bool(b.events) and b.events[-1].ahead == n,  # type: ignore[misc]
                f"waiter {i + j} to be told it is {j} from the front",
            )
        runner.finish()
    assert order == ["first", "second", "third", "fourth"]
    assert first.events == []  # it never waited
    # Each waiter was told its place, then each time it moved up.
    assert [e.ahead for e in waiters[0].events] == [1]
    assert [e.ahead for e in waiters[1].events] == [2, 1]
    assert [e.ahead for e in waiters[2].events] == [3, 2, 1]
    assert all(r.error is None for r in [first, *waiters])


def test_busy_beyond_the_queue_length_and_other_slots_are_free() -> None:
    gate = SlotGate(queue_length=1)
    order: list[str] = []
    holder = Runner(gate, "holder", order).start()
    assert holder.entered.wait(BOUND_S)
    waiter = Runner(gate, "waiter", order).start()
    wait_for(lambda: gate.waiting(0) == 1, "the waiter to queue")
    with pytest.raises(Busy), gate.hold(0, lambda e: None):
        pytest.fail("entered a full gate")
    with gate.hold(1, lambda e: None):  # slot 1 has its own line
        pass
    holder.finish()
    assert waiter.entered.wait(BOUND_S)
    waiter.finish()
    assert gate.waiting(0) == 0


def test_a_waiter_whose_callback_raises_leaves_the_line() -> None:
    gate = SlotGate(queue_length=8)
    order: list[str] = []
    holder = Runner(gate, "holder", order).start()
    assert holder.entered.wait(BOUND_S)

    def refuse(event: object) -> None:
        raise KeyboardInterrupt("the caller gave up")

    with pytest.raises(KeyboardInterrupt), gate.hold(0, refuse):
        pytest.fail("entered while the slot was held")
    assert gate.waiting(0) == 0
    behind = Runner(gate, "behind", order).start()
    wait_for(lambda: gate.waiting(0) == 1, "the next waiter to queue")
    assert [e.ahead for e in behind.events] == [1]  # the one that left is not counted
    holder.finish()
    assert behind.entered.wait(BOUND_S)
    behind.finish()


def test_an_error_inside_the_hold_frees_the_slot() -> None:
    gate = SlotGate(queue_length=8)
    with pytest.raises(RuntimeError), gate.hold(0, lambda e: None):
        raise RuntimeError("request failed")
    with gate.hold(0, lambda e: None):  # free again, without waiting
        pass
