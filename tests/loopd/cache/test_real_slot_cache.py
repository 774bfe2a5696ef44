"""Slot save/restore against the REAL llama-server, through inferproxy and `loopd serve` (issue 14).

Every server here runs with --cache-ram 0 unless a test says otherwise, so the only way a cache
survives is a restore: llama-server's own RAM cache cannot stand in for it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from boxmaker.proto import CacheLoss, CacheRestored, CacheRestoredEvent, CacheSaved, sha256_hex
from tests.support.llama import Mode
from tests.support.loopd.cache import (
    BOUND_S,
    CacheStack,
    first_usage,
    hits,
    notes,
    previous_total,
    turns,
)
from tests.support.procs import python_module
from tests.support.stack import MODES


def kinds(records: Sequence[object], kind: type) -> list[object]:
    return [r for r in records if isinstance(r, kind)]


@pytest.mark.parametrize("mode", MODES)
def test_a_server_restart_between_two_turns_costs_the_session_nothing(mode: Mode) -> None:
    # A router's model is not loaded after the restart until a request asks for it.
    with CacheStack(slots=1, mode=mode) as cs:
        cs.start_loopd()
        cs.turn("restart", "Say hello.", resume=False)
        cs.wait_saved("restart")  # the idle save, before the server dies
        before = cs.records("restart")
        cs.restart_server()
        frames = cs.turn("restart", "Now say goodbye.")
        after = turns(cs.records("restart"))[-1]
        assert kinds(after, CacheRestored), after
        assert any(isinstance(f, CacheRestoredEvent) for f in frames), frames
        usage = first_usage(after)
        assert hits(previous_total(before), usage), (previous_total(before), usage)
        assert not kinds(after, CacheLoss)


def test_two_sessions_alternating_on_one_slot_hit_the_cache_every_time() -> None:
    with CacheStack(slots=1) as cs:
        cs.start_loopd()
        said = ["Say hello.", "Name a colour.", "Name a fruit."]
        for i, text in enumerate(said):
            for session in ("alt-a", "alt-b"):
                previous = cs.records(session) if i else None
                cs.turn(session, f"{text} {notes(session) if i == 0 else ''}", resume=bool(i))
                if previous is None:
                    continue
                this = turns(cs.records(session))[-1]
                assert hits(previous_total(previous), first_usage(this)), (session, i, this)
                assert kinds(this, CacheRestored), (session, i, this)
        for session in ("alt-a", "alt-b"):
            records = cs.records(session)
            assert not kinds(records, CacheLoss), records
            assert kinds(records, CacheSaved), records


def test_a_loopd_restart_with_the_slot_still_holding_the_session_restores_nothing() -> None:
    # Two slots: the sessions live on slot 0, and the self-test of the restarted loopd takes
    # slot 1, which holds no session.
    with CacheStack(slots=2, config_slots=(0, 1), cache={"idle_save_ms": 60_000}) as cs:
        cs.start_loopd()
        cs.turn("stay", "Say hello.", resume=False)
        before = cs.records("stay")
        out = cs.stop_loopd()
        assert "stay" in cs.state()["saves"], out  # right after the turn, or at the drain
        cs.start_loopd()
        assert "selftest ok      slot_save:" in cs.output(), cs.output()
        cs.turn("stay", "Now say goodbye.")
        after = turns(cs.records("stay"))[-1]
        assert not kinds(after, CacheRestored), after
        assert hits(previous_total(before), first_usage(after))


def test_the_selftest_of_a_restarted_loopd_costs_the_session_nothing() -> None:
    # One slot and --cache-ram 0: the self-test has to use the session's slot, and nothing in
    # the server keeps the session's prefix; the save made at the drain brings it back.
    with CacheStack(slots=1, cache={"idle_save_ms": 60_000}) as cs:
        cs.start_loopd()
        cs.turn("selftest", "Say hello.", resume=False)
        before = cs.records("selftest")
        cs.stop_loopd()
        cs.start_loopd()
        cs.turn("selftest", "Now say goodbye.")
        after = turns(cs.records("selftest"))[-1]
        assert kinds(after, CacheRestored), after
        assert hits(previous_total(before), first_usage(after))
        assert not kinds(after, CacheLoss)


def test_a_file_made_under_another_context_size_is_never_restored() -> None:
    with CacheStack(slots=1) as cs:
        cs.start_loopd()
        cs.turn("foreign", "Say hello.", resume=False)
        cs.wait_saved("foreign")
        named = f"bx-*-{sha256_hex(b'foreign')[:32]}-e0.bin"  # named by a hash and the epoch
        files = sorted(p.name for p in cs.saves.glob(named))
        assert len(files) == 1, files
        cs.restart_server(ctx=1024)  # the same model, another -c
        cs.turn("foreign", "Now say goodbye.")
        after = turns(cs.records("foreign"))[-1]
        assert not kinds(after, CacheRestored), after
        assert "context size changed" in cs.output(), cs.output()
        assert sorted(p.name for p in cs.saves.glob(named)) == files


def test_without_slot_save_path_the_feature_is_off_and_nothing_changes() -> None:
    with CacheStack(slots=1, save_path=False) as cs:
        alone = subprocess.run(
            python_module("boxmaker.loopd", "selftest", "--config", str(cs.write_config())),
            capture_output=True, text=True, timeout=BOUND_S, check=False,
        )  # fmt: skip
        assert alone.returncode == 0, alone.stdout + alone.stderr
        assert alone.stdout.startswith(
            "off     slot_save: the server was not started with --slot-save-path"
        ), alone.stdout
        cs.start_loopd()
        assert "slot_save: the server was not started with --slot-save-path" in cs.output()
        cs.turn("plain", "Say hello.", resume=False)
        cs.turn("plain", "Now say goodbye.")
        records = cs.records("plain")
        assert not kinds(records, CacheSaved) + kinds(records, CacheRestored), records
        assert not cs.state(), cs.state()  # no state file: the keeper never started


def test_with_slot_save_off_loopd_asks_nothing_of_the_feature() -> None:
    with CacheStack(slots=1, cache={"slot_save": False}) as cs:
        cs.start_loopd()
        assert "slot_save" not in cs.output()
        cs.turn("off", "Say hello.", resume=False)
        cs.turn("off", "Now say goodbye.")
        records = cs.records("off")
        assert not kinds(records, CacheSaved) + kinds(records, CacheRestored), records
        assert not list(cs.saves.iterdir())
