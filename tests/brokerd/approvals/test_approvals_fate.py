"""An owner who answers a call that is no longer held is told what became of it (issue 38.1):
withdrawn by loopd (its turn was stopped), timed out, or answered already; the fates kept are
bounded (ENDED_KEPT), and a call never seen is simply not waiting."""

from __future__ import annotations

import pytest

from boxmaker.brokerd.approvals import ENDED_KEPT, Approvals, Held
from boxmaker.proto.broker import HeldCall


def hold(approvals: Approvals, call_id: str) -> Held:
    call = HeldCall(call_id, "write_file", "write_file a.txt", "", "", "", "h" + call_id)
    return approvals.hold(call)


def ended(approvals: Approvals, call_id: str, how: str) -> None:
    held = hold(approvals, call_id)
    if how == "withdrawn":
        approvals.deny(call_id, "cancelled: loopd closed the call", withdrawn=True)
    elif how == "answered":
        assert approvals.answer(call_id, held.hash, "no") is None
    approvals.wait(held, 0.0 if how == "timeout" else 5.0)


@pytest.mark.parametrize(
    ("how", "told"),
    [
        ("withdrawn", "loopd withdrew it (its turn was stopped"),
        ("timeout", "nobody answered it within approval_timeout_ms"),
        ("answered", "it was answered already (no)"),
    ],
)
def test_a_late_answer_is_told_what_became_of_the_call(how: str, told: str) -> None:
    approvals = Approvals()
    ended(approvals, "c1", how)
    why = approvals.answer("c1", "hc1", "yes")
    assert why is not None
    assert why.startswith("no call 'c1' is waiting for an answer: ")
    assert told in why
    assert told in approvals.not_held("c1")  # a claim is told the same


def test_a_withdrawn_call_not_yet_reaped_is_told_so_too() -> None:
    approvals = Approvals()
    held = hold(approvals, "c1")
    approvals.deny("c1", "cancelled: loopd closed the call", withdrawn=True)
    why = approvals.answer("c1", held.hash, "yes")  # before its wait has ended
    assert why is not None
    assert "loopd withdrew it" in why


def test_the_fates_kept_are_bounded() -> None:
    approvals = Approvals()
    for i in range(ENDED_KEPT + 1):
        ended(approvals, f"c{i}", "timeout")
    assert approvals.not_held("c0") == "no call 'c0' is waiting for an answer"
    assert "nobody answered" in approvals.not_held(f"c{ENDED_KEPT}")
    assert approvals.not_held("never") == "no call 'never' is waiting for an answer"


@pytest.mark.parametrize("after", ["answer", "close"])
def test_past_the_wait_the_owner_was_told_the_call_timed_out(after: str) -> None:
    """The chat's own clock may end the question before brokerd's waiting thread wakes (a busy
    machine): the call timed out either way, and a yes that comes after is not taken."""
    approvals = Approvals()
    call = HeldCall("c1", "write_file", "write_file a.txt", "", "", "", "hc1")
    held = approvals.hold(call, timeout_s=0.0)  # its wait has ended; no thread noticed yet
    if after == "answer":
        why = approvals.answer("c1", held.hash, "yes")
        assert why is not None
        assert "nobody answered it within approval_timeout_ms" in why
    else:
        approvals.deny("c1", "closed")
    assert approvals.wait(held, 5.0) == "timeout"
    assert "nobody answered" in approvals.not_held("c1")


def test_before_the_wait_ends_a_close_is_a_close() -> None:
    approvals = Approvals()
    call = HeldCall("c1", "write_file", "write_file a.txt", "", "", "", "hc1")
    held = approvals.hold(call, timeout_s=60.0)
    approvals.deny("c1", "closed")
    assert approvals.wait(held, 5.0) == "closed"
