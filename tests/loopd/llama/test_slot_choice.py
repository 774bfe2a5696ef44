"""A new session's slot (issue 19): `choose_slot`, `SlotGate.pick`, and `loopd serve` using them.

The serve cases run `loopd serve` as a real process against the scripted server (2 slots): two
sessions started at once land on different slots, and a restarted loopd runs its self-test on the
slot that no recent session lives on.
"""

from __future__ import annotations

import threading

from boxmaker.loopd.llama.gate import SlotGate, choose_slot
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.proto import TurnDone
from tests.support.serve import serve_env, turn


def test_choose_slot_prefers_fewer_sessions_then_less_load_then_least_recently_used() -> None:
    slots = (0, 1, 2)
    assert choose_slot(slots, {}, {}, {}) == 0
    assert choose_slot(slots, {0: 2, 1: 1, 2: 1}, {}, {}) == 1
    assert choose_slot(slots, {0: 2, 1: 1, 2: 1}, {1: 1}, {}) == 2
    assert choose_slot(slots, {0: 1, 1: 1, 2: 1}, {}, {0: 5.0, 1: 3.0, 2: 4.0}) == 1
    assert choose_slot((1, 0), {}, {}, {0: 1.0}) == 1  # never used beats used


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pick_spreads_sessions_that_start_together() -> None:
    gate = SlotGate(8, window_s=60, clock=Clock())
    assert [gate.pick((0, 1), s) for s in ("a", "b", "c", "d")] == [0, 1, 0, 1]


def test_a_session_counts_on_its_slot_for_the_window_only() -> None:
    clock = Clock()
    gate = SlotGate(8, window_s=60, clock=clock)
    for owner in ("a", "a2"):
        with gate.hold(0, lambda _e: None, owner=owner):
            pass
    clock.now += 50
    gate.seen(1, "b")
    assert gate.pick((0, 1)) == 1  # one session on slot 1 against two on slot 0
    clock.now += 11  # a and a2 went quiet past the window; b did not
    assert gate.pick((0, 1)) == 0
    assert gate.order((1, 0)) == [0, 1]


def test_a_busy_slot_loses_a_tie() -> None:
    gate = SlotGate(8, window_s=60, clock=Clock())
    gate.seen(0, "a")
    gate.seen(1, "b")
    entered, leave = threading.Event(), threading.Event()

    def hold_zero() -> None:
        with gate.hold(0, lambda _e: None, owner="a"):
            entered.set()
            leave.wait(10)

    t = threading.Thread(target=hold_zero)
    t.start()
    try:
        assert entered.wait(10)
        assert gate.pick((0, 1)) == 1
    finally:
        leave.set()
        t.join(10)


def test_two_sessions_started_together_run_on_different_slots() -> None:
    with serve_env() as env:
        env.start(spare_worker=False)
        env.model.hold()
        got: dict[str, list[object]] = {}
        threads = [
            threading.Thread(target=lambda s=s: got.update({s: turn(env.socket, s, "hi", False)}))
            for s in ("a", "b")
        ]
        for t in threads:
            t.start()
        env.model.release()
        for t in threads:
            t.join(30)
        assert all(isinstance(frames[-1], TurnDone) for frames in got.values()), got
        assert {env.log_lines(s)[0]["slot"] for s in ("a", "b")} == {0, 1}


def test_a_restarted_loopd_runs_its_selftest_on_the_slot_no_recent_session_lives_on() -> None:
    with serve_env() as env:
        daemon = env.start(spare_worker=False)
        assert isinstance(turn(env.socket, "a", "hi", False)[-1], TurnDone)
        slot = env.log_lines("a")[0]["slot"]
        daemon.stop()
        env.fake.take_unexpected()
        before = len(env.fake.requests(CHAT_PATH))
        env.start(spare_worker=False)
        fake_requests = env.fake.requests(CHAT_PATH)[before:]
        ids = {
            body["id_slot"]
            for r in fake_requests
            if isinstance(body := r.json, dict) and body["messages"][0]["role"] != "system"
        }
        assert ids == {1 - slot}, (slot, ids)
