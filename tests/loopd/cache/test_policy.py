"""loopd/cache/policy.py: the save/restore decisions, without a server (issue 14)."""

from __future__ import annotations

import re

import orjson
import pytest

from boxmaker.loopd.cache.policy import (
    MAX_COUNT,
    Mark,
    Note,
    Policy,
    Restore,
    Save,
    SlotIO,
    identity,
    marks_of,
    save_name,
)
from boxmaker.loopd.llama.errors import BadResponse
from boxmaker.loopd.llama.info import parse_slot_io, parse_slots

ID = identity("SmolLM2-135M-Instruct.Q4_1", "b2" * 32, 2048)
IO = SlotIO(500, 11_500_000, 900)


def policy(min_tokens: int = 100) -> Policy:
    return Policy(ID, min_tokens)


def test_identity_changes_with_the_model_the_template_and_the_context_size() -> None:
    ids = {
        ID,
        identity("other-model", "b2" * 32, 2048),
        identity("SmolLM2-135M-Instruct.Q4_1", "c3" * 32, 2048),
        identity("SmolLM2-135M-Instruct.Q4_1", "b2" * 32, 1024),
    }
    assert len(ids) == 4


@pytest.mark.parametrize("session", ["s-1", "a.b_c", "a..b", "a_d", "a._", "x" * 128])
def test_save_names_are_short_and_plain_whatever_the_id(session: str) -> None:
    name = save_name(ID, session, 0)
    assert re.fullmatch(rf"bx-{ID}-[0-9a-f]{{32}}-e0\.bin", name), name
    assert len(name) < 64
    assert save_name("0" * 16, session, 0) != name


def test_save_names_are_one_to_one_and_read_back_through_the_state() -> None:
    p = policy()
    for session in ("a.b", "a_db", "a"):
        p.saved(Save(0, session, p.name(session)), IO)
    assert len(set(p.by_name())) == 3
    assert p.by_name()[save_name(ID, "a_db", 0)] == "a_db"


def test_numbers_from_the_server_are_bounded_where_they_enter() -> None:
    huge = b'{"n_saved": 18446744073709551615, "n_written": 1, "timings": {"save_ms": 1e300}}'
    assert parse_slot_io(huge, "save") == SlotIO(MAX_COUNT, 1, MAX_COUNT)
    nan_like = b'{"n_restored": -5, "n_read": 2, "timings": {"restore_ms": -1e300}}'
    assert parse_slot_io(nan_like, "restore") == SlotIO(0, 2, 0)
    body = b'[{"id": 0, "is_processing": false, "id_task": 18446744073709551615, '
    body += b'"n_prompt_tokens": 9}]'
    marks = marks_of(parse_slots(body))
    assert marks == {0: Mark(MAX_COUNT, 9)}


def use(p: Policy, slot: int, session: str | None, mark: Mark) -> None:
    """A request of `session` on `slot` granted at `mark`, with nothing due before it."""
    assert p.before(slot, session, mark) == []
    p.granted(slot, session, mark)
    p.released(slot, session)


def save_of(session: str) -> Save:
    return Save(0, session, save_name(ID, session, 0))


def restore_of(session: str) -> Restore:
    return Restore(0, session, save_name(ID, session, 0))


def test_the_same_session_on_an_untouched_slot_needs_nothing() -> None:
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    assert p.before(0, "a", Mark(5, 500)) == []  # its own request moved id_task past the floor
    assert not p.restarted({0: Mark(5, 500)})


def test_another_session_saves_the_holder_first_then_the_holder_is_restored() -> None:
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    assert p.before(0, "b", Mark(5, 500)) == [save_of("a")]
    p.saved(save_of("a"), IO)
    p.granted(0, "b", Mark(5, 500))
    p.released(0, "b")
    # a comes back: b holds the slot (saved first), and a's file goes in.
    assert p.before(0, "a", Mark(9, 300)) == [save_of("b"), restore_of("a")]
    assert p.take_notes("a") == [Note("saved", 0, IO)]
    assert p.take_notes("a") == []


def test_a_saved_holder_is_not_saved_again() -> None:
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    p.saved(save_of("a"), IO)
    assert p.before(0, "b", Mark(5, 500)) == []
    assert p.idle_save(0, Mark(5, 500)) is None


def test_a_slot_that_still_holds_the_session_is_never_restored_over() -> None:
    """Never slower than no policy: an older save does not replace a longer live prefix."""
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    p.saved(save_of("a"), IO)
    use(p, 0, "a", Mark(5, 500))  # a went on past its file
    assert p.idle_save(0, Mark(8, 900)) == save_of("a")
    assert p.before(0, "a", Mark(8, 900)) == []


def test_a_server_restart_shows_as_a_lost_task_and_brings_a_restore() -> None:
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    p.saved(save_of("a"), IO)
    assert p.restarted({0: Mark(None, 0)})
    assert p.restarted({0: Mark(1, 40)})  # a new server that ran a request below the floor
    assert p.before(0, "a", Mark(None, 0)) == [restore_of("a")]
    p.restored(restore_of("a"), IO, Mark(None, 500))
    p.granted(0, "a", Mark(None, 500))
    p.released(0, "a")
    assert p.take_notes("a") == [Note("saved", 0, IO), Note("restored", 0, IO)]
    assert p.before(0, "a", Mark(0, 540)) == []  # the restored cache, then a's request: a's


def test_a_lost_unsaved_cache_is_not_saved_from_a_restarted_server() -> None:
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    assert p.before(0, "b", Mark(None, 0)) == []  # nothing of a's is left to save
    assert p.idle_save(0, Mark(None, 0)) is None


def test_short_caches_are_not_saved() -> None:
    p = policy(min_tokens=600)
    use(p, 0, "a", Mark(3, 0))
    assert p.before(0, "b", Mark(5, 500)) == []
    assert p.idle_save(0, Mark(5, 500)) is None


def test_the_selftest_saves_the_holder_and_leaves_the_slot_to_nobody() -> None:
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    assert p.before(0, None, Mark(5, 500)) == [save_of("a")]
    p.saved(save_of("a"), IO)
    p.granted(0, None, Mark(5, 500))
    assert p.holder(0, Mark(12, 80)) is None
    assert p.before(0, "a", Mark(12, 80)) == [restore_of("a")]


def test_a_failed_restore_is_not_tried_again() -> None:
    p = policy()
    p.saves["a"] = 500
    assert p.before(0, "a", Mark(None, 0)) == [restore_of("a")]
    p.restore_failed(restore_of("a"))
    assert p.before(0, "a", Mark(None, 0)) == []


def test_the_state_survives_a_round_trip_under_the_same_identity_only() -> None:
    p = policy()
    use(p, 0, "a", Mark(3, 0))
    p.saved(save_of("a"), IO)
    use(p, 1, "b", Mark(None, 0))
    back = Policy.from_json(p.to_json(), ID, 100)
    assert (back.held, back.saves, back.notes) == (p.held, p.saves, p.notes)
    other = Policy.from_json(p.to_json(), identity("m", "00" * 32, 1), 100)
    assert (other.held, other.saves, other.notes) == ({}, {}, {})


@pytest.mark.parametrize("data", [b"", b"[]", b'{"version":4,"identity":"' + ID.encode() + b'"}'])
def test_a_bad_state_file_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"JSON|version|field"):
        Policy.from_json(data, ID, 100)


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_state_file_is_read_as_empty(version: int) -> None:
    """Versions 1 and 2 named files without the epoch: none of them is ever asked for."""
    data = orjson.dumps({"version": version, "identity": ID, "held": {"0": {}}, "saves": {"a": {}}})
    p = Policy.from_json(data, ID, 100)
    assert (p.held, p.saves, p.notes) == ({}, {}, {})


def test_the_slots_parser_reads_id_task_and_n_prompt_tokens() -> None:
    body = (
        b'[{"id":0,"is_processing":false},'
        b'{"id":1,"is_processing":true,"id_task":16,"n_prompt_tokens":77}]'
    )
    assert marks_of(parse_slots(body)) == {0: Mark(None, 0), 1: Mark(16, 77)}
    with pytest.raises(BadResponse, match="id"):
        parse_slots(b'[{"id":"0","is_processing":false}]')


def test_parse_io_reads_the_save_and_restore_answers() -> None:
    save = b'{"id_slot":0,"n_saved":77,"n_written":1776084,"timings":{"save_ms":1.231}}'
    assert parse_slot_io(save, "save") == SlotIO(77, 1_776_084, 1231)
    restore = b'{"n_restored":77,"n_read":1776084,"timings":{"restore_ms":0.727}}'
    assert parse_slot_io(restore, "restore") == SlotIO(77, 1_776_084, 727)
    with pytest.raises(BadResponse, match="save"):
        parse_slot_io(restore, "save")


def test_notes_refuse_anything_but_their_own_shape() -> None:
    note = Note("restored", 1, IO)
    assert Note.from_json(note.to_json()) == note
    bad_notes: list[object] = [{"kind": "erased"}, {**note.to_json(), "tokens": -1}, [], None]
    for bad in bad_notes:
        with pytest.raises(ValueError, match="a cache note"):
            Note.from_json(bad)


def test_a_save_right_after_a_turn_only_when_a_reread_costs_more_than_k_saves() -> None:
    p = policy(min_tokens=100)
    mark = Mark(5, 1000)
    p.granted(0, "a", mark)
    p.released(0, "a")
    assert p.after_turn(0, 10) is None  # no prompt rate measured yet
    p.prompt_us = 5000.0  # 5 ms a token: 1,000 tokens re-read in 5 s
    assert p.after_turn(0, 10) == save_of("a")  # the save cost is not known: this measures
    p.saved(save_of("a"), SlotIO(1000, 1, 30_000))  # 30 us a token
    assert p.save_us == 30.0
    assert p.after_turn(0, 10) is None  # saved already
    p.released(0, "a")
    assert p.after_turn(0, 10) == save_of("a")  # 5 s against 10 x 30 ms
    assert p.after_turn(0, 200) is None  # 5 s against 200 x 30 ms
    assert p.after_turn(1, 10) is None  # a slot no session holds
