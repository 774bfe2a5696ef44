"""The cache keeper knows epochs (issue 21 item 6): save files per epoch, never restored into
another, dropped once a later epoch asks; a new epoch's first release (the pre-warm) is saved.
Against the scripted llama-server of test_keeper (real Unix socket, real files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from boxmaker.loopd.cache.policy import (
    PROBE_NAME,
    Drop,
    Mark,
    Policy,
    Restore,
    Save,
    identity,
    save_name,
)
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.llama.info import SlotIO
from boxmaker.proto import sha256_hex
from tests.support.loopd.fake_slots import TEMPLATE, keeper
from tests.support.loopd.pipe_side import PipeSide
from tests.support.procs import wait_for

ID = identity("m", "00" * 32, 2048)


def files(folder: Path) -> list[str]:
    """The save files in the folder, less the self-test's probe file."""
    probe = save_name(identity("m", sha256_hex(TEMPLATE.encode()), 2048), PROBE_NAME, 0)
    return sorted(p.name for p in (folder / "slots").glob("bx-*-e*.bin") if p.name != probe)


def name(k: Any, session: str, epoch: int) -> str:
    return save_name(k.policy.ident, session, epoch)


def test_the_epoch_is_in_the_save_files_name_and_a_later_epoch_drops_it(rig: Any) -> None:
    _, fs, folder = rig
    warned: list[str] = []
    k = keeper(folder, warned)
    k.before_grant(0, "a", 0)
    fs.run(0, 300)
    k.after_release(0, "a", 0)
    k.before_grant(0, "b", 0)  # a's epoch 0 saved at the hand-over
    assert files(folder) == [name(k, "a", 0)]
    fs.run(0, 200)
    k.after_release(0, "b", 0)
    # a compacted: epoch 1 asks. Epoch 0's file is dead (its prefix differs from the summary on):
    # removed, and never restored into epoch 1.
    notes = k.before_grant(0, "a", 1)
    assert [n["kind"] for n in notes] == ["saved"]  # a's epoch 0 save, owed to its log
    assert ("restore", 0, name(k, "a", 0)) not in fs.actions
    assert files(folder) == sorted([name(k, "b", 0)])
    assert "a" not in k.policy.saves
    fs.run(0, 250)
    k.after_release(0, "a", 1)
    k.before_grant(0, "b", 0)  # a's epoch 1 saved under its own name, b's restored
    assert files(folder) == sorted([name(k, "a", 1), name(k, "b", 0)])
    fs.run(0, 210)
    k.after_release(0, "b", 0)
    assert [n["kind"] for n in k.before_grant(0, "a", 1)] == ["saved", "restored"]
    assert fs.actions[-1] == ("restore", 0, name(k, "a", 1))
    assert warned == []


def test_a_slot_still_holding_an_earlier_epoch_is_not_saved(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [])
    k.before_grant(0, "a", 0)
    fs.run(0, 300)
    k.after_release(0, "a", 0)
    k.before_grant(0, "a", 1)  # the same slot: epoch 0's cache is replaced, not saved
    assert files(folder) == []
    fs.run(0, 280)
    k.after_release(0, "a", 1)
    # a's epoch 2 goes to slot 1, leaving epoch 1 on slot 0: b's hand-over does not save it
    k.before_grant(1, "a", 2)
    fs.run(1, 260)
    k.after_release(1, "a", 2)
    k.before_grant(0, "b", 0)
    assert files(folder) == []
    assert k.drain() == 2  # a's epoch 2 on slot 1, and b's on slot 0
    assert files(folder) == sorted([name(k, "a", 2), name(k, "b", 0)])


def test_a_new_epochs_first_release_is_saved_and_comes_back_after_a_server_restart(
    rig: Any,
) -> None:
    """The pre-warm's release (epoch > 0, nothing saved of it) is saved whatever the cost rule
    says: here the prompt rate was never measured, so an epoch 0 turn gets no after-turn save."""
    _, fs, folder = rig
    k = keeper(folder, [])  # idle_save_ms is a minute: only the after-turn save can be seen
    k.start()
    try:
        for epoch, tokens in ((0, 300), (1, 150)):  # a turn of epoch 0, the pre-warm of epoch 1
            with k.gate.hold(0, lambda _e: None):  # as the GateServer holds it
                k.before_grant(0, "a", epoch)
                fs.run(0, tokens)
                k.after_release(0, "a", epoch)
        k.turn_over("a")  # the turn that compacted is over
        wait_for(lambda: name(k, "a", 1) in files(folder), "the pre-warm's save")
        assert files(folder) == [name(k, "a", 1)]  # and none of epoch 0
    finally:
        k.drain()
    fs.restart()
    again = keeper(folder, [])  # a restarted loopd reads the epoch back from the state file
    assert again.policy.epochs == {"a": 1}
    # the pre-warm's save note (owed to the log), then the restore
    assert [n["kind"] for n in again.before_grant(0, "a", 1)] == ["saved", "restored"]
    assert [a for a in fs.actions if a[0] == "save" and a[2] == name(k, "a", 1)] == [
        ("save", 0, name(k, "a", 1))
    ]
    assert fs.tokens[0] == 150


def test_the_policy_never_restores_another_epochs_file() -> None:
    p = Policy(ID, 100)
    p.before(0, "a", Mark(None, 0), 3)
    p.granted(0, "a", Mark(1, 0), 3)
    p.saved(Save(0, "a", save_name(ID, "a", 3), 3), SlotIO(500, 5, 5))
    assert p.before(1, "a", Mark(None, 0), 2) == []  # an older epoch's ask gets nothing
    assert p.before(1, "a", Mark(None, 0), 3) == [Restore(1, "a", save_name(ID, "a", 3), 3)]
    assert p.before(1, "a", Mark(None, 0), 4) == [Drop("a", save_name(ID, "a", 3))]
    assert p.saves == {}
    back = Policy.from_json(p.to_json(), ID, 100)
    assert back.held == p.held
    assert back.held[0].epoch == 3


class EpochCache:
    """A SlotCache that records the epoch each call was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str | None, int]] = []

    def before_grant(self, slot: int, session: str | None, epoch: int) -> list[dict[str, object]]:
        self.calls.append(("before", slot, session, epoch))
        return []

    def after_release(self, slot: int, session: str | None, epoch: int) -> None:
        self.calls.append(("after", slot, session, epoch))

    def turn_over(self, session: str | None) -> None:
        self.calls.append(("turn_over", -1, session, -1))


def test_the_gate_gives_the_keeper_the_epoch_of_the_ask_it_holds() -> None:
    """Over real pipes: the worker's ask names its epoch; the keeper hears it on both sides."""
    cache = EpochCache()
    with PipeSide(SlotGate(4), cache, lambda: "s1") as side:
        epoch = [0]
        side.pipe_gate.epoch = lambda: epoch[0]
        for epoch[0] in (0, 3):
            with side.pipe_gate.hold(1, lambda _e: None):
                pass
        wait_for(lambda: len(cache.calls) == 4, "both releases reach the keeper")
        assert cache.calls == [("before", 1, "s1", 0), ("after", 1, "s1", 0),
                               ("before", 1, "s1", 3), ("after", 1, "s1", 3)]  # fmt: skip
