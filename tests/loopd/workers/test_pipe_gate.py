"""PipeGate, the worker's side of the main process's SlotGate, passes the Gate kit over real pipes.

Each side the kit asks for is one "worker": a PipeGate writing to a real pipe, a GateServer on
the other end reading it, and the answers coming back over a second pipe, each end read by its
own thread, as loopd's main process and a worker do. Every side shares the one SlotGate.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.workers.gate import PipeGate
from boxmaker.proto import QueuedEvent
from tests.support.loopd.check_gate import CHECKS, GateMaker, GateSide
from tests.support.loopd.pipe_side import PipeSide
from tests.support.procs import wait_for


@contextmanager
def pipe_gates(queue_length: int) -> Iterator[GateSide]:
    gate = SlotGate(queue_length)
    sides: list[PipeSide] = []

    def side() -> PipeGate:
        sides.append(PipeSide(gate))
        return sides[-1].pipe_gate

    try:
        yield side
    finally:
        for s in sides:
            s.close()


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_pipe_gate_passes_the_gate_kit(check: Callable[[GateMaker], None]) -> None:
    check(pipe_gates)


def test_a_worker_gone_while_holding_frees_the_slot() -> None:
    gate = SlotGate(8)
    holder, waiter = PipeSide(gate), PipeSide(gate)
    entered = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with holder.pipe_gate.hold(0, lambda e: None):
            entered.set()
            release.wait(5.0)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert entered.wait(5.0)
    events: list[object] = []
    got = threading.Event()

    def wait_in_line() -> None:
        with waiter.pipe_gate.hold(0, events.append):
            got.set()

    w = threading.Thread(target=wait_in_line, daemon=True)
    w.start()
    wait_for(lambda: events == [QueuedEvent(1)], "the waiter to be queued")
    holder.server.close()  # what the main process does when the holder's pipe reaches EOF
    assert got.wait(5.0), "the slot of a worker that went away was not given to the next"
    release.set()
    t.join(5.0)
    w.join(5.0)
    holder.close()
    waiter.close()


def test_after_the_parent_is_gone_a_hold_goes_through_at_once() -> None:
    side = PipeSide(SlotGate(0))
    side.down.close()  # the main process is gone: the worker's reader sees EOF
    wait_for(lambda: side.pipe_gate._gone, "the PipeGate to hear that the parent is gone")
    with side.pipe_gate.hold(0, lambda e: None), side.pipe_gate.hold(0, lambda e: None):
        pass  # twice, nested: nobody is left to share the slot with
    side.up.close()
    side.threads[0].join(5.0)
    os.close(side.fds[0])
    os.close(side.fds[1])


class RecordingCache:
    """A SlotCache that owes every session one note, and records what the gate told it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str | None]] = []

    def before_grant(self, slot: int, session: str | None, epoch: int) -> list[dict[str, object]]:
        self.calls.append(("before", slot, session))
        return [{"kind": "restored", "slot": slot, "tokens": 7, "size": 70, "elapsed_us": 9}]

    def turn_over(self, session: str | None) -> None:
        pass

    def after_release(self, slot: int, session: str | None, epoch: int) -> None:
        self.calls.append(("after", slot, session))


def test_the_grant_carries_the_cache_notes_and_the_release_reaches_the_cache() -> None:
    """Issue 14: the keeper acts with the slot held, before the grant and after the release."""
    cache = RecordingCache()
    with PipeSide(SlotGate(4), cache, lambda: "s1") as side:
        got: list[list[object]] = []
        side.pipe_gate.on_cache = got.append
        with side.pipe_gate.hold(1, lambda _e: None):
            assert got == [[{"kind": "restored", "slot": 1, "tokens": 7, "size": 70,
                             "elapsed_us": 9}]]  # fmt: skip
            assert cache.calls == [("before", 1, "s1")]
        assert cache.calls == [("before", 1, "s1"), ("after", 1, "s1")]


class FailingCache:
    """A SlotCache whose every call fails as the keeper did on an unencodable number (24.2)."""

    def __init__(self) -> None:
        self.calls = 0

    def before_grant(self, slot: int, session: str | None, epoch: int) -> list[dict[str, object]]:
        self.calls += 1
        raise TypeError("Type is not JSON serializable: float")

    def turn_over(self, session: str | None) -> None:
        pass

    def after_release(self, slot: int, session: str | None, epoch: int) -> None:
        self.calls += 1
        raise TypeError("Type is not JSON serializable: float")


def test_a_failing_cache_keeper_neither_withholds_the_grant_nor_the_release() -> None:
    """Nothing on the gate's thread may die without answering: a hold after a failure goes on."""
    warned: list[str] = []
    with PipeSide(SlotGate(4), FailingCache(), lambda: "s1", warned.append) as side:

        def two_holds() -> None:
            for _ in range(2):  # the second finds the slot free: the first was let go
                with side.pipe_gate.hold(1, lambda _e: None):
                    pass

        holder = threading.Thread(target=two_holds, daemon=True)
        holder.start()
        holder.join(10.0)
        assert not holder.is_alive(), "a hold never got its grant or its gate_left"
        assert len(warned) == 4, warned
        assert "TypeError" in warned[0], warned


def test_each_ask_carries_the_sessions_epoch_to_the_main_process() -> None:
    """Issue 21: the cache keeper's save files are per epoch, so the main process's side of the
    gate knows the epoch of the ask it holds (the worker reads it from its log at each ask)."""
    with PipeSide(SlotGate(4)) as side:
        epochs = iter([0, 2])
        side.pipe_gate.epoch = lambda: next(epochs)
        for expected in (0, 2):
            with side.pipe_gate.hold(0, lambda _e: None):
                assert side.server.epoch == expected  # set before the grant was sent
        side.pipe_gate.epoch = None  # a worker that names none: epoch 0
        with side.pipe_gate.hold(0, lambda _e: None):
            assert side.server.epoch == 0
