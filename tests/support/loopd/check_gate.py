"""A conformance kit for slot gates (`boxmaker.loopd.llama.gate.Gate`), after trio's stream kits.

Each check takes a *gate maker*: called with a `queue_length`, it returns a context manager for a
fresh gate; inside it, each call of the value it yields gives one client's side of that gate. For
`SlotGate` every side is the same object; for a gate that lives in another process, each side is
one worker's end of a pipe to it. Every client here runs on its own thread, as the clients of
loopd's workers run in their own processes.

What every gate must do (M2a brief, section 4, step 1): first come first served; `Queued{ahead}`
with the place in line, then again each time it changes; `Busy` at once when `queue_length` are
already waiting, leaving nothing behind; the slot given up, or the line left, on every way out.

Nothing sleeps and hopes: each step waits on an event, or on a condition with the bound
`BOUND_S`, and the clients are let go and joined when a check ends, whether it passed or not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from boxmaker.loopd.llama.errors import Busy
from boxmaker.loopd.llama.gate import Gate
from boxmaker.proto import QueuedEvent
from tests.support.procs import wait_for

GateSide = Callable[[], Gate]
GateMaker = Callable[[int], AbstractContextManager[GateSide]]

BOUND_S = 5.0  # seconds; never reached by a gate that works


class Client:
    """One request on its own thread: hold `slot` through `side`, then wait to be let go."""

    def __init__(self, side: GateSide, name: str, order: list[str], slot: int = 0) -> None:
        self.name = name
        self.events: list[object] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None
        self._raise: BaseException | None = None
        self._gate = side()
        self.thread = threading.Thread(target=self._run, args=(order, slot), daemon=True)

    def _run(self, order: list[str], slot: int) -> None:
        try:
            with self._gate.hold(slot, self.events.append):
                order.append(self.name)
                self.entered.set()
                self.release.wait(BOUND_S)
                if self._raise is not None:
                    raise self._raise
        except BaseException as exc:
            self.error = exc

    def start(self) -> Client:
        self.thread.start()
        return self

    def queued_at(self) -> list[int]:
        return [e.ahead for e in self.events if isinstance(e, QueuedEvent)]

    def wait_queued(self, ahead: int) -> None:
        """Waits until the latest Queued this client got says `ahead`."""
        wait_for(
            lambda: self.queued_at()[-1:] == [ahead] or self.error is not None,
            f"{self.name} to be told it is {ahead} from the front",
            BOUND_S,
        )
        assert self.error is None, f"{self.name} failed: {self.error!r}"

    def wait_entered(self) -> None:
        assert self.entered.wait(BOUND_S), f"{self.name} never held the slot ({self.error!r})"

    def finish(self, raising: BaseException | None = None) -> None:
        """Lets the client out of its hold (by raising `raising` in its body) and joins it."""
        self._raise = raising
        self.release.set()
        self.thread.join(BOUND_S)
        assert not self.thread.is_alive(), f"{self.name} did not leave the gate"


@contextmanager
def clients(side: GateSide) -> Iterator[Callable[..., Client]]:
    """A way to start clients on a gate; every client is let go and joined at the end."""
    started: list[Client] = []

    def start(name: str, order: list[str], slot: int = 0) -> Client:
        client = Client(side, name, order, slot).start()
        started.append(client)
        return client

    try:
        yield start
    finally:
        for c in started:
            c.release.set()
        for c in started:
            c.thread.join(BOUND_S)


def enters_at_once(start: Callable[..., Client], slot: int = 0) -> bool:
    """True when a new client holds `slot` with no Queued event (the slot was free, no line)."""
    probe = start(f"a probe of slot {slot}", [], slot)
    probe.wait_entered()
    probe.finish()
    return probe.events == []


def check_fifo_order_and_queued_counts(make: GateMaker) -> None:
    order: list[str] = []
    with make(8) as side, clients(side) as start:
        first = start("first", order)
        first.wait_entered()
        waiters = []
        for ahead, name in enumerate(["second", "third", "fourth"], start=1):
            waiters.append(start(name, order))
            waiters[-1].wait_queued(ahead)
        first.finish()
        for i, waiter in enumerate(waiters):
            waiter.wait_entered()
            # Let those behind see their new place before the line moves again.
            for ahead, behind in enumerate(waiters[i + 1 :], start=1):
                behind.wait_queued(ahead)
            waiter.finish()
    assert order == ["first", "second", "third", "fourth"]
    assert first.events == []  # it never waited
    # Each waiter was told its place, then each time it moved up.
    assert [w.queued_at() for w in waiters] == [[1], [2, 1], [3, 2, 1]]
    assert [c.error for c in [first, *waiters]] == [None] * 4


def check_busy_when_the_line_is_full(make: GateMaker) -> None:
    order: list[str] = []
    with make(1) as side, clients(side) as start:
        holder = start("holder", order)
        holder.wait_entered()
        waiter = start("waiter", order)
        waiter.wait_queued(1)
        refused = start("refused", order)
        wait_for(
            lambda: refused.error or refused.events, "the third client to be answered", BOUND_S
        )
        assert isinstance(refused.error, Busy), f"a full line answered {refused.events!r}"
        assert refused.events == [], "a refused client was queued"
        assert enters_at_once(start, slot=1), "slot 1 has its own line"
        holder.finish()
        waiter.wait_entered()
        waiter.finish()
        assert enters_at_once(start), "Busy left something behind in the line"
    assert order == ["holder", "waiter"]


def check_queue_length_zero_refuses_any_wait(make: GateMaker) -> None:
    order: list[str] = []
    with make(0) as side, clients(side) as start:
        holder = start("holder", order)
        holder.wait_entered()
        refused = start("refused", order)
        wait_for(
            lambda: refused.error or refused.events, "the second client to be answered", BOUND_S
        )
        assert isinstance(refused.error, Busy), f"queue_length 0 answered {refused.events!r}"
        holder.finish()
        assert enters_at_once(start)


def check_release_on_error_in_the_body(make: GateMaker) -> None:
    order: list[str] = []
    with make(8) as side, clients(side) as start:
        for error in [RuntimeError("request failed"), KeyboardInterrupt("interrupted")]:
            holder = start(f"holder ({type(error).__name__})", order)
            holder.wait_entered()
            waiter = start(f"waiter ({type(error).__name__})", order)
            waiter.wait_queued(1)
            holder.finish(raising=error)
            assert holder.error is error
            waiter.wait_entered()  # the slot went to the next in line
            waiter.finish()
            assert enters_at_once(start)


def check_a_waiter_whose_callback_raises_leaves_the_line(make: GateMaker) -> None:
    order: list[str] = []
    with make(8) as side, clients(side) as start:
        holder = start("holder", order)
        holder.wait_entered()

        def refuse(event: object) -> None:
            raise KeyboardInterrupt("the caller gave up")

        entered = False
        try:
            with side().hold(0, refuse):
                entered = True
        except KeyboardInterrupt:
            pass
        assert not entered, "entered while the slot was held"
        behind = start("behind", order)
        behind.wait_queued(1)  # the one that left is not counted
        holder.finish()
        behind.wait_entered()
        behind.finish()
        assert behind.queued_at() == [1]
        assert enters_at_once(start)


CHECKS: list[Callable[[GateMaker], None]] = [
    check_fifo_order_and_queued_counts,
    check_busy_when_the_line_is_full,
    check_queue_length_zero_refuses_any_wait,
    check_release_on_error_in_the_body,
    check_a_waiter_whose_callback_raises_leaves_the_line,
]


def check_gate(make: GateMaker) -> None:
    """Every check, in turn, each on a fresh gate."""
    for check in CHECKS:
        check(make)
