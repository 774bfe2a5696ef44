"""`/compact` through `loopd serve` (issue 21): a `turn` with `compact: true` on loop.sock folds
the session into a new epoch in its worker, with `compacting` and `compacted` events and a
`turn_done`; the next turn runs in the new epoch; `bxctl verify` checks both epochs. Real
processes and sockets; the scripted model on the fake server."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import orjson
import pytest

from boxmaker.proto import (
    ChannelBody,
    CompactedEvent,
    CompactingEvent,
    CompactStep,
    ErrorCode,
    TurnDone,
    WireError,
)
from boxmaker.session.baseline import BASELINE_MAX_BYTES
from boxmaker.session.verify import verify_session
from tests.support.serve import ServeEnv, serve_env, turn
from tests.support.turn import calls, say

LONG = "a long answer that fills the context. " * 20
SUMMARY = "## Goal\ntest\n## What was done\ntwo turns\n"


STEPS = ["summarising", "switching", "prewarming"]


def steps(events: Sequence[ChannelBody]) -> list[str]:
    """The compaction's steps as the channel told them (the summary's size updates left out:
    how many there are is timing), then `compacted`."""
    out: list[str] = []
    for e in events:
        if isinstance(e, CompactingEvent) and not (e.step is CompactStep.SUMMARISING and e.written):
            out.append(str(e.step))
        elif isinstance(e, CompactedEvent):
            out.append("compacted")
    return out


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        yield e


def test_compact_on_the_channel_folds_the_session(env: ServeEnv) -> None:
    # n_ctx is the fake's 2,048 "tokens" (bytes); at = 0.99 keeps the threshold out of the way.
    env.start(spare_worker=False, compact={"keep_turns": 1, "min_cut": 0.0, "at": 0.99})
    env.model.load([say(LONG), say(LONG)])
    assert isinstance(turn(env.socket, "s1", "first", resume=False)[-1], TurnDone)
    assert isinstance(turn(env.socket, "s1", "second")[-1], TurnDone)
    env.model.load([say(SUMMARY), say("(pre-warm)")])
    frames = turn(env.socket, "s1", "/compact", compact=True)
    final = frames[-1]
    assert isinstance(final, TurnDone), final
    assert final.content == "compacted into epoch 1"
    events = [f for f in frames if isinstance(f, CompactingEvent | CompactedEvent)]
    assert steps(events) == [*STEPS, "compacted"]  # each step told (issue 30.5)
    compacting, compacted = events[0], events[-1]
    assert isinstance(compacting, CompactingEvent)
    assert isinstance(compacted, CompactedEvent)
    assert compacting.reason == "asked"
    assert (compacted.epoch, compacted.error) == (1, "")
    assert (env.home / "sessions" / "s1" / "1.jsonl").exists()
    env.model.load([say("third answer")])
    assert isinstance(turn(env.socket, "s1", "third")[-1], TurnDone)
    finding = verify_session(env.home, "s1")
    assert finding.ok, finding.error
    assert finding.epochs == 2
    # again: the kept turn is folded now; then only one turn is left: an error that says why
    env.model.load([say(SUMMARY), say("(pre-warm)")])
    final = turn(env.socket, "s1", "/compact", compact=True)[-1]
    assert isinstance(final, TurnDone), final
    assert final.content == "compacted into epoch 2"
    served = env.model.served
    frames = turn(env.socket, "s1", "/compact", compact=True)
    assert env.model.served == served  # asked nothing
    final = frames[-1]
    assert isinstance(final, WireError)
    assert final.code == ErrorCode.SESSION_FULL
    assert "nothing was folded: nothing to fold" in final.message


def test_recall_through_serve_with_fake_tools(env: ServeEnv) -> None:
    """`recall` in a worker of `loopd serve` with FakeTools (no brokerd): after `/compact`, the
    model calls it for the folded owner message and gets it back exactly."""
    env.start(spare_worker=False, compact={"keep_turns": 1, "min_cut": 0.0, "at": 0.99})
    env.model.load([say(LONG)])
    assert isinstance(turn(env.socket, "s1", "the code word is teal", resume=False)[-1], TurnDone)
    env.model.load([say("ok")])
    assert isinstance(turn(env.socket, "s1", "second")[-1], TurnDone)
    env.model.load([say(SUMMARY), say("(pre-warm)")])
    assert isinstance(turn(env.socket, "s1", "/compact", compact=True)[-1], TurnDone)
    recall = {"name": "recall", "arguments": {"epoch": 0, "seq": 1}}
    env.model.load([calls(("call_tool", recall)), say("teal")])
    final = turn(env.socket, "s1", "what was the code word?")[-1]
    assert isinstance(final, TurnDone), final
    path = env.home / "sessions" / "s1" / "1.jsonl"
    results = [r for r in map(orjson.loads, path.read_bytes().splitlines())
               if r["type"] == "tool_result"]  # fmt: skip
    assert len(results) == 1
    head, content = results[0]["content"].split("\n", 1)
    assert content == "the code word is teal"
    assert head.startswith("[recalled: epoch 0, seq 1, user of ")


# Issue 29.1: a server that ignores max_tokens (the fake does) streams a summary of any size; and
# the owner's words up to [compact] owner_chars at its largest. Each variant folds with the
# summary cut to its budget, the next turn runs in the new epoch, and the session verifies.
# (Before: the switch committed a baseline over its read bound, the turn ended `internal`, and
# the next turn was appended after the `epoch_end`: a session nothing could open again.)
@pytest.mark.parametrize(
    ("summary_bytes", "owner_chars", "first"),
    [
        (200_000, 1600, "f" * 5000),
        (250_000, 1600, "f" * 5000),
        (1_000_000, 1600, "f" * 5000),
        (200, 16_000, "w" * 1_200),
        (250_000, 16_000, "\u00e9\u4e2d" * 600),
    ],
)
def test_an_over_size_summary_or_owner_text_still_folds(
    env: ServeEnv, summary_bytes: int, owner_chars: int, first: str
) -> None:
    compact = {"keep_turns": 1, "min_cut": 0.0, "at": 0.99, "owner_chars": owner_chars}
    env.start(spare_worker=False, compact=compact)
    env.model.load([say("A" * 3000), say(LONG)])  # a long first answer: the fold cuts it
    assert isinstance(turn(env.socket, "s1", first, resume=False)[-1], TurnDone)
    assert isinstance(turn(env.socket, "s1", "second")[-1], TurnDone)
    env.model.load([say("S" * summary_bytes), say("(pre-warm)")])
    final = turn(env.socket, "s1", "/compact", compact=True)[-1]
    assert isinstance(final, TurnDone), final
    folder = env.home / "sessions" / "s1"
    size = (folder / "1.baseline.json").stat().st_size
    assert size <= BASELINE_MAX_BYTES
    env.model.load([say("third answer")])
    assert isinstance(turn(env.socket, "s1", "third")[-1], TurnDone)
    env.model.load([say("fourth answer")])
    assert isinstance(turn(env.socket, "s1", "fourth")[-1], TurnDone)
    finding = verify_session(env.home, "s1")
    assert finding.ok, finding.error
    assert finding.epochs >= 2  # the threshold may fold again: the fake counts bytes


# Issue 29.3: one long message, as a new user would send it. The fake's /tokenize counts a token
# per 4 bytes; its slot is 2,048 tokens, [compact] at 0.75: a turn holds at most 1,536.
TOO_LONG = [
    "x" * 100_000,  # the 100 KB
    "y" * 1_000_000,
    "\u4e2d" * 40_000,  # 120,000 bytes of UTF-8
    "word " * 1_050,  # 1,313 tokens: just past the 1,309 that fit beside the baseline
    "line\n" * 50_000,
]


@pytest.mark.parametrize("text", TOO_LONG, ids=lambda t: f"{len(t.encode())}B")
def test_a_message_that_cannot_fit_is_refused_before_it_is_appended(
    env: ServeEnv, text: str
) -> None:
    """Before: the message was appended, every later turn failed `session_full`, and /compact
    could not fold it (it is the kept turn)."""
    env.start(spare_worker=False, compact={"keep_turns": 1})
    env.model.load([say("first answer")])
    assert isinstance(turn(env.socket, "s1", "hello", resume=False)[-1], TurnDone)
    log = env.home / "sessions" / "s1" / "0.jsonl"
    before = log.read_bytes()
    served = env.model.served
    final = turn(env.socket, "s1", text)[-1]
    assert isinstance(final, WireError), final
    assert final.code == ErrorCode.BAD_REQUEST
    tokens = len(text) // 4 + 1  # the fake's count
    assert f"this message is {tokens:,} tokens" in final.message, final.message
    assert "at most " in final.message
    assert "Nothing was recorded" in final.message
    assert log.read_bytes() == before  # nothing appended
    assert env.model.served == served  # nothing asked of the model
    env.model.load([say("still here")])  # and the session goes on
    done = turn(env.socket, "s1", "a short one")[-1]
    assert isinstance(done, TurnDone)
    assert done.content == "still here"
    assert verify_session(env.home, "s1").ok


@pytest.mark.parametrize("size", [2_400, 3_200, 4_000, 5_000, 6_000])
def test_a_message_that_fits_alone_but_not_beside_the_history_folds_first(
    env: ServeEnv, size: int
) -> None:
    """The slot is not past `at` (no fold due), but this message beside it would be: the fold
    comes first, then the message is read in the new epoch (before: the message was sent beside
    the whole history, and a server with a full context answered 400)."""
    compact = {"keep_turns": 1, "min_cut": 0.0, "at": 0.95, "owner_chars": 0}
    env.start(spare_worker=False, compact=compact)
    env.model.load([say("ok"), say("ok")])
    assert isinstance(turn(env.socket, "s1", "one " + "x" * 400, resume=False)[-1], TurnDone)
    assert isinstance(turn(env.socket, "s1", "two")[-1], TurnDone)
    usage = [r for r in env.log_lines("s1") if r["type"] == "usage"][-1]
    used = usage["cache_n"] + usage["prompt_n"] + usage["predicted_n"]
    assert used < 0.95 * 2048 <= used + size // 4 + 1  # not due; crowded with the message
    env.model.load([say(SUMMARY), say("(pre-warm)"), say("read it")])
    frames = turn(env.socket, "s1", "z" * size)
    assert isinstance(frames[-1], TurnDone), frames[-1]
    events = [f for f in frames if isinstance(f, CompactingEvent | CompactedEvent)]
    assert steps(events) == [*STEPS, "compacted"], events
    assert isinstance(events[-1], CompactedEvent)
    assert events[-1].error == "", events[-1]
    assert frames[-1].content == "read it"
    assert (env.home / "sessions" / "s1" / "1.jsonl").exists()
    assert verify_session(env.home, "s1").ok
