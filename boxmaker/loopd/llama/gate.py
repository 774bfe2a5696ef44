"""The slot gate: one request in flight per slot, first come first served, a bounded queue.

M2a brief, section 4, step 1. `Gate` is the seam: what `Client` needs of a gate, so a gate that
lives in another process (the worker's side of loopd's, M2b) can stand in for `SlotGate`;
tests/support/loopd/check_gate.py holds the checks every `Gate` must pass. `SlotQueue` is the core:
the holder of one slot and the tickets waiting for it, with no threads and no clock, so its rules
get plain tests. `SlotGate` is the shell: one `threading.Condition` over a `SlotQueue` per slot,
used as a context manager around exactly one request (never across a tool call or an approval):

    with gate.hold(slot, on_event):
        ...one request...

A request that finds the slot taken waits in line and gets `Queued(ahead)`, then another one each
time the number ahead of it changes. With `queue_length` already waiting it gets `Busy` at once. A
waiter that leaves early (its `on_event` raised, or it was interrupted) leaves the line cleanly
and the ones behind it move up. Holding has no time limit of its own: each holder's request is
bounded by its own waits and liveness.

`choose_slot` is the slot choice (issue 19): a new session takes the slot that will cost the
least cache and serve it soonest. `SlotGate.pick` feeds it what the gate has seen: which sessions
(`owner`s) used each slot within `window_s`, how many hold or wait for it now, when it was last
let go. A session keeps the slot it was given (SessionStart): see docs/decisions/slots.md.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from boxmaker.loopd.llama.errors import Busy
from boxmaker.loopd.llama.types import OnEvent
from boxmaker.proto import QueuedEvent


class Gate(Protocol):
    """Holds one slot at a time for one request, first come first served, with a bounded line."""

    def hold(self, slot: int, on_event: OnEvent) -> AbstractContextManager[None]:
        """Holds `slot` for the body of the `with`, after waiting in line if need be.

        While it waits it calls `on_event(QueuedEvent(ahead))` with its place, then again each
        time that number changes. The slot is given up, or the line left, on every way out of the
        `with`: its end, an exception in its body, and an exception raised by `on_event`.

        Raises:
            Busy: `queue_length` requests are already waiting for the slot; nothing is queued.
        """
        ...


class Left(Exception):
    """A waiter left the line because its `leave` said so (SlotGate.hold)."""


def _stay() -> bool:
    return False


class Ticket:
    """One request's place at one slot."""

    __slots__ = ()


class SlotQueue:
    """The holder of one slot and the tickets waiting for it, in arrival order. [core]"""

    def __init__(self, slot: int, queue_length: int) -> None:
        self.slot = slot
        self.queue_length = queue_length  # the most tickets that may wait (the holder not counted)
        self.holder: Ticket | None = None
        self.waiting: deque[Ticket] = deque()

    def arrive(self, ticket: Ticket) -> int:
        """Puts `ticket` in line. Returns how many are ahead of it (0: it holds the slot now).

        Raises:
            Busy: `queue_length` tickets are already waiting.
        """
        if self.holder is None and not self.waiting:
            self.holder = ticket
            return 0
        if len(self.waiting) >= self.queue_length:
            raise Busy(
                f"slot {self.slot} is busy and {len(self.waiting)} requests are already waiting "
                f"for it (queue_length = {self.queue_length})"
            )
        self.waiting.append(ticket)
        return self.ahead(ticket)

    def ahead(self, ticket: Ticket) -> int:
        """How many are ahead of a waiting ticket: the holder, if any, and those before it."""
        if ticket is self.holder:
            return 0
        return (self.holder is not None) + self.waiting.index(ticket)

    def try_enter(self, ticket: Ticket) -> bool:
        """True if `ticket` holds the slot (taking it if it is free and the ticket is first)."""
        if self.holder is ticket:
            return True
        if self.holder is None and self.waiting and self.waiting[0] is ticket:
            self.holder = self.waiting.popleft()
            return True
        return False

    def leave(self, ticket: Ticket) -> None:
        """Gives the slot up, or leaves the line. Doing it twice does nothing."""
        if self.holder is ticket:
            self.holder = None
        elif ticket in self.waiting:
            self.waiting.remove(ticket)


def choose_slot(
    slots: tuple[int, ...],
    recent: dict[int, int],
    load: dict[int, int],
    last_used: dict[int, float],
) -> int:
    """The slot for a new session: the fewest sessions active on it lately (`recent`: each one
    is a cache this session would evict, or share the slot's time with), then the fewest
    requests holding or waiting for it now (`load`), then the least recently used (a slot never
    used first), then the first listed."""
    order = {slot: i for i, slot in enumerate(slots)}
    return min(
        slots,
        key=lambda s: (recent.get(s, 0), load.get(s, 0), last_used.get(s, -1.0), order[s]),
    )


class SlotGate:
    """The gate for every slot of one loopd: the threading shell over one SlotQueue per slot.

    It is a `Gate` for the threads of one process. `window_s`: how long a session's use of a slot
    counts in `pick`.
    """

    def __init__(
        self,
        queue_length: int,
        window_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue_length = queue_length
        self._cond = threading.Condition()
        self._queues: dict[int, SlotQueue] = {}
        self._window_s = window_s
        self._clock = clock
        self._seen: dict[int, dict[str, float]] = {}  # slot -> owner -> last seen on it
        self._last_used: dict[int, float] = {}

    def seen(self, slot: int, owner: str, at: float | None = None) -> None:
        """`owner` (a session) used `slot` at `at` (now if None; loopd's start passes the times
        its sessions' logs were last written, so a restart keeps the picture)."""
        with self._cond:
            self._see(slot, owner, self._clock() if at is None else at)

    def _see(self, slot: int, owner: str, at: float) -> None:
        for other, owners in self._seen.items():
            if other != slot:
                owners.pop(owner, None)  # a session lives on one slot
        self._seen.setdefault(slot, {})[owner] = at
        self._last_used[slot] = max(self._last_used.get(slot, at), at)

    def order(self, slots: tuple[int, ...]) -> list[int]:
        """`slots` from the one `pick` would give first to the one it would give last."""
        with self._cond:
            left = list(slots)
            out = []
            recent, load = self._recent(), self._load()
            while left:
                out.append(choose_slot(tuple(left), recent, load, self._last_used))
                left.remove(out[-1])
            return out

    def pick(self, slots: tuple[int, ...], owner: str | None = None) -> int:
        """The slot a new session should take (`choose_slot`); `owner` counts on it from now,
        so sessions that start together spread over the slots."""
        with self._cond:
            slot = choose_slot(slots, self._recent(), self._load(), self._last_used)
            if owner is not None:
                self._see(slot, owner, self._clock())
            return slot

    def _recent(self) -> dict[int, int]:
        since = self._clock() - self._window_s
        for owners in self._seen.values():
            for owner in [o for o, at in owners.items() if at < since]:
                del owners[owner]
        return {slot: len(owners) for slot, owners in self._seen.items()}

    def _load(self) -> dict[int, int]:
        return {slot: (q.holder is not None) + len(q.waiting) for slot, q in self._queues.items()}

    def _queue(self, slot: int) -> SlotQueue:
        if slot not in self._queues:
            self._queues[slot] = SlotQueue(slot, self._queue_length)
        return self._queues[slot]

    def wake(self) -> None:
        """Wakes every waiter, so that one whose `leave` now says True leaves the line."""
        with self._cond:
            self._cond.notify_all()

    @contextmanager
    def hold(
        self,
        slot: int,
        on_event: OnEvent,
        *,
        leave: Callable[[], bool] | None = None,
        owner: str | None = None,
    ) -> Iterator[None]:
        """See `Gate.hold`. `leave`, checked while waiting (after `wake()`), makes the waiter
        leave the line by raising `Left`: loopd's main process holds the slot for a worker on
        the other end of a pipe, and that worker can go away while it waits. `owner`: the
        session the request is for, which `pick` counts on the slot."""
        ticket = Ticket()
        with self._cond:
            queue = self._queue(slot)
            ahead = queue.arrive(ticket)  # Busy leaves nothing behind
        try:
            if ahead:
                self._wait(queue, ticket, ahead, on_event, leave or _stay)
            yield
        finally:
            with self._cond:
                queue.leave(ticket)
                if owner is not None:
                    self._see(slot, owner, self._clock())
                else:
                    self._last_used[slot] = self._clock()
                self._cond.notify_all()  # the next in line, and those whose `ahead` changed

    def _wait(
        self,
        queue: SlotQueue,
        ticket: Ticket,
        ahead: int,
        on_event: OnEvent,
        leave: Callable[[], bool],
    ) -> None:
        # on_event is called without the lock, so a slow caller never blocks the gate.
        on_event(QueuedEvent(ahead))
        while True:
            with self._cond:
                while not queue.try_enter(ticket) and queue.ahead(ticket) == ahead and not leave():
                    self._cond.wait()
                if queue.holder is ticket:
                    return
                if leave():
                    raise Left(f"left the line for slot {queue.slot}")
                ahead = queue.ahead(ticket)
            on_event(QueuedEvent(ahead))
