"""Compaction in the turn loop (issue 21), against the scripted model on the fake server: the
threshold trigger between turns and between iterations, the requests on the wire (the compaction
request extends the last one; the first turn after the switch extends the pre-warm), and every
bound: an empty summary, a tool call in the summary (once, twice), a context-full answer, too
small a cut, max_attempts, and no loop whatever the model writes.

The scripted model counts bytes, not tokens (tests/support/turn.py), so `n_ctx` here is
in the fake's bytes: each test sets it from the size the conversation reached.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from boxmaker.loopd.turn.compact import INSTRUCTION, REFUSED
from boxmaker.loopd.turn.compactor import Compactor
from boxmaker.proto import (
    CompactingEvent,
    CompactStep,
    EpochEnd,
    ErrorCode,
    TurnDone,
    Usage,
    WireError,
)
from boxmaker.session.store import SessionLog
from boxmaker.session.verify import verify_session
from tests.support.loopd.compact import LONG, SUMMARY, Chat, chat
from tests.support.turn import Env, Said, calls, chat_bodies, new_session, say


def steps(events: Sequence[object]) -> list[tuple[str, CompactStep]]:
    """The compaction steps told, without the summary's size updates (their number is timing)."""
    return [
        (e.reason, e.step)
        for e in events
        if isinstance(e, CompactingEvent) and not (e.step is CompactStep.SUMMARISING and e.written)
    ]


def used(log: SessionLog) -> int:
    u = next(r for r in reversed(log.records) if isinstance(r, Usage))
    return u.cache_n + u.prompt_n + u.predicted_n


def two_turns(c: Chat) -> None:
    assert isinstance(c.run("one: the number is 41", say(LONG + " one")), TurnDone)
    assert isinstance(c.run("two: the colour is teal", say(LONG + " two")), TurnDone)


def arm(c: Chat) -> None:
    """Sets the trigger just under what the session holds now."""
    c.compactor.n_ctx = int(used(c.log) / c.compactor.config.at)


def test_threshold_compacts_before_the_next_turn_and_keeps_the_cache(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        two_turns(c)
        arm(c)
        before = len(chat_bodies(env.fake))
        out = c.run("And now?", say(SUMMARY), say("(pre-warm)"), say("Now this."))
        assert isinstance(out, TurnDone), out
        assert log.epoch == 1, c.events[:3]
        bodies = chat_bodies(env.fake)[before - 1 :]
        last, compaction, prewarm, first = bodies
        # the compaction request extends the epoch's last request, plus the instruction
        n = len(last["messages"])
        assert compaction["messages"][:n] == last["messages"]
        assert compaction["messages"][n]["content"] == LONG + " two"
        assert compaction["messages"][-1] == {"role": "user", "content": INSTRUCTION}
        assert compaction["tools"] == last["tools"]
        # the first turn after it extends the pre-warm's prefix
        assert first["messages"][: len(prewarm["messages"])] == prewarm["messages"]
        assert first["messages"][-1] == {"role": "user", "content": "And now?"}
        assert "## Earlier in this conversation" in first["messages"][0]["content"]
        assert "one: the number is 41" in first["messages"][0]["content"]  # the owner's words
        # on the fake's byte cache: the summary reads only the instruction, the turn only itself
        end = env_epoch_end(env.home)
        previous_total = sum(
            (u.cache_n + u.prompt_n + u.predicted_n)
            for u in [r for r in epoch0(env.home) if isinstance(r, Usage)][-1:]
        )
        assert end.cache_n >= previous_total - 64
        turn_usage = out.usage
        assert turn_usage.prompt_n <= len(orjson_line(first["messages"][-1])) + 64
        assert [type(e) for e in c.events[:1]] == [CompactingEvent]
        (done,) = c.compacted()
        assert done.error == ""
        assert done.epoch == 1
        assert done.after < done.before
        assert verify_session(env.home, "s1").ok


def orjson_line(obj: Any) -> bytes:
    import orjson

    return orjson.dumps(obj) + b"\n"


def epoch0(home: Path) -> list[Any]:
    from boxmaker.session.epoch_files import check_chain

    return list(check_chain("s1", home / "sessions" / "s1")[0].checked.records)


def env_epoch_end(home: Path) -> EpochEnd:
    end = epoch0(home)[-1]
    assert isinstance(end, EpochEnd)
    return end


def test_compaction_between_iterations_does_not_count_as_one(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        two_turns(c)
        arm(c)
        c.compactor.n_ctx = int(c.compactor.n_ctx * 1.15)  # not due before the turn ...
        out = c.run(
            "What time is it? " + LONG,
            calls(("clock", {})),  # ... due after its tool round: compaction, then the answer
            say(SUMMARY),
            say("(pre-warm)"),
            say("It is noon."),
            tool_iterations=1,  # one round allowed: the compaction is not counted as one
        )
        assert isinstance(out, TurnDone), out
        assert log.epoch == 1
        kinds = [type(r).__name__ for r in log.records]
        assert kinds == [
            "SessionStart", "User", "Assistant", "ToolResult", "Assistant", "Usage",
        ]  # fmt: skip
        assert steps(c.events) == [
            ("threshold", CompactStep.SUMMARISING),
            ("threshold", CompactStep.SWITCHING),
            ("threshold", CompactStep.PREWARMING),
        ]  # one compaction, each step told (issue 30.5)


def test_empty_summary_goes_on_uncompacted_and_max_attempts_bounds_it(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log, max_attempts=2)
        two_turns(c)
        arm(c)
        for i in range(2):
            out = c.run(f"turn {i}", say("   "), say(f"answer {i}"))
            assert isinstance(out, TurnDone), out
            (failed,) = c.compacted()
            assert failed.error == "the model's summary was empty"
        served = env.model.served
        out = c.run("turn 3", say("answer 3"))
        assert isinstance(out, TurnDone)
        assert env.model.served == served + 1  # no summary request: the epoch's attempts are spent
        assert c.compacted() == []  # and no event: the last failure said so
        assert log.epoch == 0


def test_a_tool_call_in_the_summary_is_refused_once(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        two_turns(c)
        arm(c)
        before = len(chat_bodies(env.fake))
        out = c.run(
            "next",
            calls(("clock", {})),
            say(SUMMARY),
            say("(pre-warm)"),
            say("ok"),
            tool_iterations=1,
        )
        assert isinstance(out, TurnDone), out
        assert log.epoch == 1
        first, second = chat_bodies(env.fake)[before : before + 2]
        assert second["messages"][: len(first["messages"])] == first["messages"]
        assert second["messages"][-1]["role"] == "tool"
        assert second["messages"][-1]["content"] == REFUSED


def test_a_tool_call_twice_fails_and_the_turn_goes_on(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        two_turns(c)
        arm(c)
        out = c.run("next", calls(("clock", {})), calls(("clock", {})), say("ok"))
        assert isinstance(out, TurnDone), out
        assert "called a tool instead of writing the summary, twice" in c.compacted()[0].error
        assert log.epoch == 0


def test_context_full_compacts_once_and_retries_once(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        two_turns(c)
        before = len(chat_bodies(env.fake))
        out = c.run("big", Said(status=400), say(SUMMARY), say("(pre-warm)"), say("fits now"))
        assert isinstance(out, TurnDone), out
        assert out.content == "fits now"
        assert log.epoch == 1
        full, compaction = chat_bodies(env.fake)[before : before + 2]
        # the summary request replays the records before the turn: a request the server took
        assert compaction["messages"][-1]["content"] == INSTRUCTION
        assert {"role": "user", "content": "big"} not in compaction["messages"]
        assert full["messages"][-1] == {"role": "user", "content": "big"}
        assert {reason for reason, _ in steps(c.events)} == {"context_full"}
        assert steps(c.events)[0] == ("context_full", CompactStep.SUMMARISING)


def test_context_full_when_compaction_fails_is_session_full_with_what_to_do(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        two_turns(c)
        out = c.run("big", Said(status=400), say(""))
        assert isinstance(out, WireError)
        assert out.code == ErrorCode.SESSION_FULL
        assert "compaction could not make room: the model's summary was empty" in out.message
        assert "/compact" in out.message
        assert "keep_turns" in out.message
        assert env.model.left() == 0  # one compaction, no second retry
        assert log.epoch == 0


def test_too_small_a_cut_asks_the_model_nothing(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log, min_cut=0.95)
        two_turns(c)
        arm(c)
        served = env.model.served
        out = c.run("next", say("ok"))
        assert isinstance(out, TurnDone)
        assert env.model.served == served + 1
        assert "under [compact] min_cut 95%" in c.compacted()[0].error


def test_no_loop_whatever_the_model_writes(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log, max_attempts=2)
        two_turns(c)
        arm(c)
        # every summary attempt answers with a tool call; every iteration is due
        script = [calls(("clock", {}))] * 4 + [calls(("clock", {}))] * 3 + [say("done")]
        out = c.run("go", *script, tool_iterations=8)
        assert isinstance(out, TurnDone | WireError)
        assert len(c.compacted()) == 2  # two attempts in the epoch, then none


# ---- issue 29.5: attempts counted per epoch from the log -----------------------------------------


def _fresh(c: Chat) -> Compactor:
    """A new worker's compactor on the same log and settings: it knows nothing but the log."""
    old = c.compactor
    return Compactor(old.client, old.config, old.n_ctx, old.system, old.home, old.max_tokens)


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
def test_spent_attempts_stay_spent_for_a_new_worker(env: Env, max_attempts: int) -> None:
    """Before: a restart started the count again (the attempts lived in worker memory)."""
    with new_session(env.home) as log:
        c = chat(env, log, max_attempts=max_attempts)
        two_turns(c)
        arm(c)
        for i in range(max_attempts):
            assert isinstance(c.run(f"turn {i}", say("   "), say(f"answer {i}")), TurnDone)
            assert c.compacted()[0].error == "the model's summary was empty"
        c.compactor = _fresh(c)
        served = env.model.served
        assert isinstance(c.run("after the restart", say("answer")), TurnDone)
        assert env.model.served == served + 1  # no summary request
        assert log.epoch == 0


def test_folds_that_asked_nothing_do_not_spend_the_attempts(env: Env) -> None:
    """Before: too small a cut early in the epoch (nothing asked) spent max_attempts, and the
    session never folded again in that worker's life."""
    with new_session(env.home) as log:
        c = chat(env, log, max_attempts=2, min_cut=0.35)
        assert isinstance(c.run("one", say(LONG + " one")), TurnDone)
        assert isinstance(c.run("two", say(LONG + " two")), TurnDone)
        arm(c)
        reasons = []
        for i in range(12):
            # one text serves as the answer, the summary or the pre-warm: a fold that asks
            # nothing leaves the model's queue as it was
            out = c.run(f"turn {i}", *[say(LONG + f" {i}")] * 3)
            assert isinstance(out, TurnDone), out
            reasons += [e.error for e in c.compacted()]
            if log.epoch == 1:
                break
        assert log.epoch == 1, reasons
        assert len([r for r in reasons if "min_cut" in r]) >= 2, reasons  # more than max_attempts


@pytest.mark.parametrize("grow_turns", [3, 6])
def test_spent_attempts_are_tried_again_once_the_context_has_grown(
    env: Env, grow_turns: int
) -> None:
    with new_session(env.home) as log:
        c = chat(env, log, max_attempts=2)
        two_turns(c)
        arm(c)
        for i in range(2):
            assert isinstance(c.run(f"turn {i}", say(""), say(f"answer {i}")), TurnDone)
        spent_at = used(log)
        served = env.model.served
        assert isinstance(c.run("small", say("ok")), TurnDone)
        assert env.model.served == served + 1  # spent: the context has not grown
        for i in range(grow_turns):  # the context grows past 10%, then a summary is asked again
            out = c.run(f"grow {i}", say(SUMMARY), say("(pre-warm)"), say(LONG + f" {i}"))
            assert isinstance(out, TurnDone), out
            if log.epoch == 1:
                break
        assert log.epoch == 1
        end = env_epoch_end(env.home)
        assert end.cache_n + end.prompt_n >= spent_at * 1.1
