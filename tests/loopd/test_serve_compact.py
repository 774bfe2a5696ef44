"""`/compact` through `loopd serve` (issue 21): a `turn` with `compact: true` on loop.sock folds
the session into a new epoch in its worker, with `compacting` and `compacted` events and a
`turn_done`; the next turn runs in the new epoch; `bxctl verify` checks both epochs. Real
processes and sockets; the scripted model on the fake server."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from boxmaker.proto import (
    CompactedEvent,
    CompactingEvent,
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
    assert [type(e) for e in events] == [CompactingEvent, CompactedEvent]
    compacting, compacted = events
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
        (2_000, 16_000, "w" * 100_000),
        (250_000, 16_000, "\u00e9\u4e2d" * 40_000),
    ],
)
def test_an_over_size_summary_or_owner_text_still_folds(
    env: ServeEnv, summary_bytes: int, owner_chars: int, first: str
) -> None:
    compact = {"keep_turns": 1, "min_cut": 0.0, "at": 0.99, "owner_chars": owner_chars}
    env.start(spare_worker=False, compact=compact)
    env.model.load([say(LONG), say(LONG)])
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
