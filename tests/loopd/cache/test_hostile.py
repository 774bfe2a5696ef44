"""The keeper against odd servers, damaged save folders and a planted state file (issue 24).

Each case was seen failing before its fix: an odd number from the server hung every later turn
(the gate's thread died in the keeper's persist), a count past 2^63-1 crashed the worker, one
dangling link in the save folder switched the size bound off, pruning removed other identities'
files, and slot-cache.json was trusted (its names, its .tmp written through a link, its growth).
The first cases run `loopd serve` as a real process against the scripted server.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.loopd.cache.policy import MAX_COUNT, save_name
from boxmaker.loopd.cache.state import STATE_FILE
from boxmaker.proto import CacheSaved, TurnDone, verify_log
from tests.support.fakeserver import FakeServer
from tests.support.loopd.fake_slots import FakeSlots, keeper
from tests.support.procs import Daemon, python_module, short_tmpdir
from tests.support.recorded import Recorded
from tests.support.replies import Reply
from tests.support.serve import START_LINE, ServeEnv, config_text, serve_env, turn

BOUND_S = 30.0


class SlotServe:
    """`loopd serve` with [cache] slot_save on one slot, the fake playing /slots and the files."""

    def __init__(self, env: ServeEnv) -> None:
        self.env = env
        (env.folder / "slots").mkdir()
        self.fs = FakeSlots(env.folder / "slots")
        env.fake.on("GET", "/slots", self.fs.slots)
        env.fake.on("POST", "/completion", self.fs.completion)
        for slot in (0, 1):
            env.fake.on("POST", f"/slots/{slot}", self.fs.action)
        env.fake.on("POST", "/v1/chat/completions", self.chat)

    def chat(self, request: Recorded) -> Reply:
        body = request.json
        assert isinstance(body, dict)
        self.fs.run(body["id_slot"], 300)  # the cache the completion leaves in its slot
        return self.env.model(request)

    def start(self) -> Daemon:
        text = config_text(self.env.folder).replace("slots = [0, 1]", "slots = [0]")
        text += "[cache]\nslot_save = true\nmin_tokens = 1\nidle_save_ms = 600000\n"
        path = self.env.folder / "loopd.toml"
        path.write_text(text)
        daemon = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(path)))
        self.env.daemons.append(daemon)
        daemon.wait_for_line(START_LINE, BOUND_S)
        return daemon


@pytest.fixture
def slot_serve() -> Iterator[SlotServe]:
    with serve_env() as env:
        yield SlotServe(env)


ODD = [
    {"timings": {"save_ms": 1e300, "restore_ms": 1e300}},
    {"n_saved": 2**63 + 5, "n_written": 2**64 - 1, "n_restored": 2**63 + 5, "n_read": 2**63},
]


@pytest.mark.parametrize("odd", ODD, ids=["ms-1e300", "counts-past-2^63"])
def test_odd_numbers_in_a_save_answer_end_no_turn_and_hang_none(
    slot_serve: SlotServe, odd: dict[str, Any]
) -> None:
    """Two sessions share slot 0: b's grant saves a's cache, a's next grant restores it."""
    slot_serve.start()
    slot_serve.fs.odd = odd
    sock = slot_serve.env.socket
    for session, resume in (("a", False), ("b", False), ("a", True), ("c", False), ("b", True)):
        frames = turn(sock, session, "hi", resume)  # the socket's timeout bounds a hang
        assert isinstance(frames[-1], TurnDone), (session, frames[-1])
    records = verify_log((slot_serve.env.home / "sessions" / "a" / "0.jsonl").read_bytes())
    saved = [r for r in records.records if isinstance(r, CacheSaved)]
    assert saved, "a's cache was saved when b took the slot"
    assert all(0 <= r.elapsed_us <= MAX_COUNT and 0 <= r.tokens <= MAX_COUNT for r in saved)
    state = orjson.loads((slot_serve.env.home / STATE_FILE).read_bytes())
    assert "a" in state["saves"]


# ---- the save folder ------------------------------------------------------------------------


@pytest.fixture
def rig() -> Iterator[tuple[FakeServer, FakeSlots, Path]]:
    folder = short_tmpdir("bh-")
    (folder / "slots").mkdir()
    fake_slots = FakeSlots(folder / "slots")
    try:
        with FakeServer(folder / "infer.sock") as server:
            server.on("GET", "/slots", fake_slots.slots)
            server.on("GET", "/props", fake_slots.props)
            server.on("POST", "/completion", fake_slots.completion)
            for slot in (0, 1):
                server.on("POST", f"/slots/{slot}", fake_slots.action)
            yield server, fake_slots, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def three_saves(k: Any, fs: FakeSlots) -> None:
    for session, tokens in (("a", 300), ("b", 250), ("c", 100)):
        k.before_grant(0, session)
        fs.run(0, tokens)
        k.after_release(0, session)
    k.drain()


def test_a_dangling_link_in_the_save_folder_leaves_the_bound_on(rig: Any) -> None:
    _, fs, folder = rig
    warned: list[str] = []
    k = keeper(folder, warned, max_bytes=500)
    os.symlink(folder / "nowhere", folder / "slots" / f"bx-{k.policy.ident}-dangling.bin")
    three_saves(k, fs)
    ours = sorted(p.name for p in (folder / "slots").glob(f"bx-{k.policy.ident}-*[0-9a-f].bin"))
    assert ours == sorted(save_name(k.policy.ident, s, 0) for s in ("b", "c")), warned


def test_pruning_leaves_other_identities_files_alone(rig: Any) -> None:
    _, fs, folder = rig
    other = folder / "slots" / "bx-0123456789abcdef-someone.bin"
    other.write_bytes(b"y" * 10_000)
    os.utime(other, (1, 1))  # the oldest file in the folder
    k = keeper(folder, [], max_bytes=500)
    three_saves(k, fs)
    assert other.exists()
    assert set(k.policy.saves) == {"b", "c"}


def test_save_files_past_their_age_are_removed_and_forgotten(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [], max_age_s=60)
    three_saves(k, fs)
    old = folder / "slots" / save_name(k.policy.ident, "a", 0)
    os.utime(old, (1, 1))
    k.before_grant(1, "d")  # any grant's save prunes; so does the next drain
    fs.run(1, 50)
    k.after_release(1, "d")
    k.drain()
    assert not old.exists()
    assert "a" not in k.policy.saves
    assert {"b", "c", "d"} <= set(k.policy.saves)


def test_a_session_id_at_the_length_limit_gets_a_save(rig: Any) -> None:
    _, fs, folder = rig
    long_id = "a" + "_." * 63 + "b"  # 128 characters; escaped, they made a 279-character name
    assert len(long_id) == 128
    warned: list[str] = []
    k = keeper(folder, warned)
    k.before_grant(0, long_id)
    fs.run(0, 300)
    k.after_release(0, long_id)
    assert k.drain() == 1
    assert warned == []
    assert k.policy.saves == {long_id: 300}


# ---- the state file -------------------------------------------------------------------------


def state_path(folder: Path) -> Path:
    return folder / "home" / STATE_FILE


def test_a_state_file_naming_a_bad_session_is_refused(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [])
    three_saves(k, fs)
    state = orjson.loads(state_path(folder).read_bytes())
    state["saves"]["../../etc/passwd"] = state["saves"].pop("a")
    state_path(folder).write_bytes(orjson.dumps(state))
    warned: list[str] = []
    again = keeper(folder, warned)
    assert "../../etc/passwd" not in again.policy.saves
    assert any("unreadable" in w and "session id" in w for w in warned), warned


def test_the_state_files_tmp_is_never_written_through_a_link(rig: Any) -> None:
    _, fs, folder = rig
    victim = folder / "victim"
    victim.write_bytes(b"keep me")
    (folder / "home").mkdir()
    os.symlink(victim, folder / "home" / (STATE_FILE + ".tmp"))
    k = keeper(folder, [])
    three_saves(k, fs)
    assert victim.read_bytes() == b"keep me"
    assert not state_path(folder).is_symlink()
    assert set(orjson.loads(state_path(folder).read_bytes())["saves"]) == {"a", "b", "c"}


def test_a_fifo_as_the_state_file_starts_empty_without_hanging(rig: Any) -> None:
    _, _, folder = rig
    (folder / "home").mkdir()
    os.mkfifo(state_path(folder))
    warned: list[str] = []
    k = keeper(folder, warned)
    assert k.policy.saves == {}
    assert any("FIFO" in w for w in warned), warned


def test_the_state_file_forgets_sessions_whose_files_are_gone(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [])
    three_saves(k, fs)
    (folder / "slots" / save_name(k.policy.ident, "b", 0)).unlink()
    again = keeper(folder, [])
    assert set(again.policy.saves) == {"a", "c"}


def test_the_state_file_is_not_rewritten_when_nothing_changed(rig: Any) -> None:
    _, fs, folder = rig
    k = keeper(folder, [])
    k.before_grant(0, "a")
    fs.run(0, 300)
    k.after_release(0, "a")
    before = state_path(folder).stat().st_mtime_ns
    os.utime(state_path(folder), ns=(1, 1))
    for _ in range(3):  # the same session again and again on its slot: nothing new to keep
        k.before_grant(0, "a")
        fs.run(0, 320)
        k.after_release(0, "a")
    assert state_path(folder).stat().st_mtime_ns == 1, before
