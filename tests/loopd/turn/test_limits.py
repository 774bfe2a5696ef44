"""The limits as pure decisions: the result cap and the batch judge."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boxmaker.loopd.turn.limits import (
    TRUNCATED_MARK,
    BatchPlan,
    LoopLimits,
    TurnLimiter,
    Verdict,
    cap_result,
    text_problem,
)
from boxmaker.proto import ToolCall

RUN, REPEATED, NOT_RUN = Verdict.RUN, Verdict.REPEATED, Verdict.NOT_RUN


# ---- the cap ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cap", "kept"),
    [
        ("abc", 3, "abc"),  # exactly the cap: untouched
        ("abcd", 3, "abc"),
        ("aé", 2, "a"),  # é is 2 bytes: byte 2 is inside it
        ("aé", 3, "aé"),
        ("a€b", 3, "a"),  # € is 3 bytes
        ("a€b", 4, "a€"),
        ("😀x", 3, ""),  # a 4-byte character never split
        ("😀x", 4, "😀"),
        ("e\u0301e\u0301", 2, "e"),  # a combining accent is its own character
    ],
)
def test_cap_cuts_at_a_character_boundary(text: str, cap: int, kept: str) -> None:
    got, cut = cap_result(text, cap)
    if kept == text:
        assert (got, cut) == (text, False)
    else:
        assert (got, cut) == (kept + TRUNCATED_MARK, True)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.integers(1, 64))
@example("é" * 20, 11)
def test_cap_keeps_the_longest_prefix_that_fits(text: str, cap: int) -> None:
    got, cut = cap_result(text, cap)
    data = text.encode("utf-8")
    if len(data) <= cap:
        assert (got, cut) == (text, False)
        return
    assert cut
    assert got.endswith(TRUNCATED_MARK)
    kept = got[: -len(TRUNCATED_MARK)]
    assert text.startswith(kept)
    assert len(kept.encode("utf-8")) <= cap
    # One more character would not fit: nothing was cut that the cap had room for.
    assert len(text[: len(kept) + 1].encode("utf-8")) > cap


def test_text_problem_finds_a_lone_surrogate() -> None:
    assert text_problem("fine é") is None
    assert text_problem("bad \ud800") == ("a lone surrogate at index 4, which UTF-8 cannot carry")


# ---- the batch judge ----------------------------------------------------------------------------


def tc(name: str, arguments: str = "{}", call_id: str = "c") -> ToolCall:
    return ToolCall(call_id, name, arguments)


def test_rounds_up_to_the_limit_run_then_the_next_ends_the_turn() -> None:
    judge = TurnLimiter(LoopLimits(tool_iterations=2))
    assert judge.plan([tc("a", "1")]) == BatchPlan((RUN,), None)
    assert judge.plan([tc("a", "2"), tc("b")]) == BatchPlan((RUN, RUN), None)
    plan = judge.plan([tc("a", "3"), tc("c")])
    assert plan.verdicts == (NOT_RUN, NOT_RUN)
    assert plan.ends_turn is not None
    assert "limit of 2 tool rounds (tool_iterations)" in plan.ends_turn
    assert plan.note(0) == f"not run: {plan.ends_turn}"


def test_one_round_is_singular() -> None:
    judge = TurnLimiter(LoopLimits(tool_iterations=1))
    judge.plan([tc("a")])
    plan = judge.plan([tc("b")])
    assert plan.ends_turn is not None
    assert "limit of 1 tool round (" in plan.ends_turn


def test_repeat_is_the_same_name_and_the_same_argument_bytes() -> None:
    judge = TurnLimiter(LoopLimits())
    assert judge.plan([tc("a", '{"x":1}')]).verdicts == (RUN,)
    # Same JSON value, other bytes: not a repeat. Same bytes, other tool: not a repeat.
    assert judge.plan([tc("a", '{"x": 1}'), tc("b", '{"x":1}')]).verdicts == (RUN, RUN)
    plan = judge.plan([tc("a", '{"x":1}'), tc("c")])
    assert plan == BatchPlan((REPEATED, RUN), None)
    note = plan.note(0)
    assert note is not None
    assert note.startswith("not run: this call repeats an earlier call")
    assert plan.note(1) is None


def test_the_second_repeat_ends_the_turn_and_runs_nothing_of_its_batch() -> None:
    judge = TurnLimiter(LoopLimits())
    judge.plan([tc("a")])
    assert judge.plan([tc("a")]).verdicts == (REPEATED,)
    plan = judge.plan([tc("b"), tc("a"), tc("c")])
    assert plan.verdicts == (NOT_RUN, REPEATED, NOT_RUN)
    assert plan.ends_turn is not None
    assert "repeated again" in plan.ends_turn


def test_repeats_within_one_batch() -> None:
    assert TurnLimiter(LoopLimits()).plan([tc("a"), tc("a")]).verdicts == (RUN, REPEATED)
    plan = TurnLimiter(LoopLimits()).plan([tc("a"), tc("a"), tc("a")])
    assert plan.verdicts == (NOT_RUN, REPEATED, REPEATED)
    assert plan.ends_turn is not None


def test_repeat_detection_off() -> None:
    judge = TurnLimiter(LoopLimits(repeat_detection=False))
    for _ in range(3):
        assert judge.plan([tc("a"), tc("a")]) == BatchPlan((RUN, RUN), None)
