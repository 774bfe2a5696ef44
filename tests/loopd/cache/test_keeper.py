"""loopd/cache/keeper.py against a scripted llama-server on a real Unix socket (issue 14).

`FakeSlots` plays /slots, /props and the slot save/restore actions as llama-server does (measured
on the real one: id_task moves with completions only; a missing file answers 400; no
--slot-save-path answers 501), and writes each save file into a folder, so the keeper's bound on
the folder can be seen at work.
"""

from __future__ import annotations

from typing import Any

import pytest

from boxmaker.loopd.cache.keeper import server_identity
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.selftest.run import measure_prompt_rate, open_keeper
from tests.support.loopd.fake_slots import MODEL, config, keeper
from tests.support.procs import wait_for


def test_sessions_taking_turns_on_a_slot_are_saved_and_restored(rig: Any) -> None:
    _, fs, folder = rig
    warned: list[str] = []
    k = keeper(folder, warned)
    assert k.before_grant(0, "a") == []
    fs.run(0, 300)
    k.after_release(0, "a")
    assert k.before_grant(0, "b") == []  # a saved first: a's note waits for a's next grant
    fs.run(0, 200)
    k.after_release(0, "b")
    notes = k.before_grant(0, "a")
    assert [(n["kind"], n["tokens"]) for n in notes] == [("saved", 300), ("restored", 300)]
    assert [a[0] for a in fs.actions[1:]] == ["save", "save", "restore"]
    assert fs.tokens[0] == 300
    fs.run(0, 350)
    k.after_release(0, "a")
    assert k.before_grant(0, "a") == []  # still a's: nothing asked but /slots
    assert len(fs.actions) == 4
    assert warned == []


def test_a_restarted_server_of_another_context_size_gets_no_file(rig: Any) -> None:
    _, fs, folder = rig
    warned: list[str] = []
    k = keeper(folder, warned)
    k.before_grant(0, "a")
    fs.run(0, 300)
    k.after_release(0, "a")
    assert k.drain() == 1
    fs.restart(n_ctx=1024)
    assert k.before_grant(0, "a") == [{"kind": "saved", "slot": 0, "tokens": 300, "size": 300,
                                       "elapsed_us": 1500}]  # fmt: skip
    assert [a[0] for a in fs.actions] == ["save", "save"]  # the probe's and the drain's
    assert "context size changed" in warned[0]


def test_the_same_server_restarted_gets_its_file_back(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [])
    k.before_grant(0, "a")
    fs.run(0, 300)
    k.after_release(0, "a")
    k.drain()
    fs.restart()
    assert [n["kind"] for n in k.before_grant(0, "a")] == ["saved", "restored"]


def test_an_idle_slot_is_saved_and_the_state_outlives_the_keeper(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [], idle_save_ms=50)
    k.start()
    k.before_grant(1, "a")
    fs.run(1, 120)
    k.after_release(1, "a")
    wait_for(lambda: ("save", 1, k.policy.name("a")) in fs.actions, "the idle save of slot 1")
    k.drain()
    again = keeper(folder, [])
    assert again.policy.saves == {"a": 120}
    fs.restart()
    assert [n["kind"] for n in again.before_grant(1, "a")] == ["saved", "restored"]


def test_the_save_folder_is_kept_under_max_bytes(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [], max_bytes=500)
    for session, tokens in (("a", 300), ("b", 250), ("c", 100)):
        k.before_grant(0, session)
        fs.run(0, tokens)
        k.after_release(0, session)
    k.drain()  # a, b and c saved in turn: a is the oldest and goes
    names = {p.name for p in (folder / "slots").glob("bx-*")}
    assert names == {k.policy.name("b"), k.policy.name("c")}
    assert set(k.policy.saves) == {"b", "c"}


def test_a_server_without_slot_save_path_turns_the_feature_off(rig: Any) -> None:
    _, fs, folder = rig
    fs.save_path = False
    cfg = config(folder)
    said: list[str] = []
    made = open_keeper(cfg, SlotGate(8), Client(cfg.inference).props, said.append, said.append)
    assert made is None
    assert said == [
        "selftest off     slot_save: the server was not started with --slot-save-path; "
        "the feature is off"
    ]


def test_the_identity_is_the_servers(rig: Any) -> None:
    _, _, folder = rig
    k = keeper(folder, [])
    props = Client(config(folder).inference).props()
    assert k.policy.ident == server_identity(MODEL, props)


def test_a_failure_in_the_keeper_still_grants_the_slot(rig: Any) -> None:
    _, _, folder = rig
    warned: list[str] = []
    k = keeper(folder, warned)

    def broken(*_args: object) -> list[object]:
        raise RuntimeError("a bug")

    k.policy.before = broken  # type: ignore[method-assign,assignment]
    assert k.before_grant(0, "a") == []
    assert warned == ["cache: slot 0 for a: RuntimeError('a bug'); granted without it"]


def test_a_slot_is_saved_right_after_a_turn_when_a_reread_costs_more(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [])  # idle_save_ms is a minute: only the after-turn save can be seen
    with k.around_selftest() as slot:
        assert slot == 0
        measure_prompt_rate(k, slot, lambda _line: None)  # as the self-test's run does
    assert k.policy.prompt_us == 1000 * 1000 / 192  # the fake reads 192 tokens in a second
    k.start()
    try:
        k.before_grant(1, "a")
        fs.run(1, 300)
        k.after_release(1, "a")
        k.turn_over("a")  # the final frame was relayed
        wait_for(lambda: ("save", 1, k.policy.name("a")) in fs.actions, "the after-turn save")
    finally:
        k.drain()


@pytest.mark.parametrize("completions", [2, 3, 5, 8, 9])
def test_a_tool_loop_is_saved_once_after_its_turn(rig: Any, completions: int) -> None:
    """Issue 29.10: the after-turn save waits for the turn's end; each completion of a tool loop
    (a grant and a release each) saves nothing. Before: one save per release."""
    _, fs, folder = rig
    k = keeper(folder, [])  # idle_save_ms is a minute: only the after-turn save can be seen
    with k.around_selftest() as slot:
        measure_prompt_rate(k, slot, lambda _line: None)
    k.start()
    try:
        for i in range(completions):
            with k.gate.hold(1, lambda _e: None):  # as the GateServer holds it
                k.before_grant(1, "a")
                fs.run(1, 300 + 50 * i)
                k.after_release(1, "a")
        b = ("save", 0, k.policy.name("b"))
        with k.gate.hold(0, lambda _e: None):  # another session's turn ends meanwhile
            k.before_grant(0, "b")
            fs.run(0, 300)
            k.after_release(0, "b")
        k.turn_over("b")
        wait_for(lambda: b in fs.actions, "b's after-turn save")
        saves = [a for a in fs.actions if a[0] == "save" and a[1] == 1]
        assert saves == []  # none in a's loop
        k.turn_over("a")
        wait_for(lambda: [a for a in fs.actions if a[0] == "save" and a[1] == 1], "a's save")
        k.turn_over("a")  # a second turn_over with nothing released since: nothing more
        k.turn_over(None)
    finally:
        k.drain()
    assert [a for a in fs.actions if a[0] == "save" and a[1] == 1] == [
        ("save", 1, k.policy.name("a"))
    ]
