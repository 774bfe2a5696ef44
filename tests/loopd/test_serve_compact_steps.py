"""A `/compact` through `loopd serve` tells each of its steps (issue 30.5): the summary being
written (its size as it grows), the switch, the pre-warm with the prompt's progress as the server
reads the new epoch's prefix, then `compacted`. Real processes and sockets; the fake server
streams the summary a piece at a time and reads the pre-warm's prefix in three steps, slowly,
so a step that says nothing while it waits shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.turn.compact import INSTRUCTION
from boxmaker.loopd.turn.compactor import SUMMARY_EVERY_S
from boxmaker.proto import (
    CompactedEvent,
    CompactingEvent,
    CompactStep,
    ProgressEvent,
    TurnDone,
)
from tests.support.client import chunk_obj
from tests.support.recorded import Recorded
from tests.support.replies import Reply, sse_reply
from tests.support.serve import ServeEnv, serve_env, turn
from tests.support.turn import prompt_bytes, say

SUMMARY = "## Goal\ntest\n## What was done\ntwo turns\n## Open questions\nnone\n"
PIECE_S = 0.05  # between the summary's pieces: the whole summary takes several SUMMARY_EVERY_S
PIECES = [SUMMARY[i : i + 2] for i in range(0, len(SUMMARY), 2)]
PROGRESS_S = 0.4  # between the pre-warm's progress events
LONG = "a long answer that fills the context. " * 20


def summary_reply(body: dict[str, Any]) -> Reply:
    size = len(prompt_bytes(body))
    events = [chunk_obj(content=p) for p in PIECES]
    events.append(chunk_obj(finish="stop", predicted=len(PIECES), cache_n=size - 40, prompt_n=40))
    return sse_reply(events, delay_s=PIECE_S)


def prewarm_reply(body: dict[str, Any]) -> Reply:
    total = len(prompt_bytes(body))
    events = [chunk_obj(progress=(total, 0, total * k // 3)) for k in (1, 2, 3)]
    events += [chunk_obj(content="x"), chunk_obj(finish="length", predicted=1, cache_n=0,
                                                  prompt_n=total)]  # fmt: skip
    return sse_reply(events, delay_s=PROGRESS_S)


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        model = e.model

        def chat(request: Recorded) -> Reply:
            body = request.json
            assert isinstance(body, dict)
            if body["messages"][-1].get("content") == INSTRUCTION:
                return summary_reply(body)
            if body.get("max_tokens") == 1:
                return prewarm_reply(body)
            return model(request)

        e.fake.on("POST", CHAT_PATH, chat)
        yield e


def test_each_step_of_a_compact_is_told_on_the_channel(env: ServeEnv) -> None:
    env.start(spare_worker=False, compact={"keep_turns": 1, "min_cut": 0.0, "at": 0.99})
    env.model.load([say(LONG), say(LONG)])
    assert isinstance(turn(env.socket, "s1", "first", resume=False)[-1], TurnDone)
    assert isinstance(turn(env.socket, "s1", "second")[-1], TurnDone)
    frames = turn(env.socket, "s1", "/compact", compact=True)
    assert isinstance(frames[-1], TurnDone), frames[-1]
    told = [f for f in frames if isinstance(f, CompactingEvent | CompactedEvent | ProgressEvent)]
    compacting = [f for f in told if isinstance(f, CompactingEvent)]
    assert compacting[0] == CompactingEvent(
        "asked", compacting[0].tokens, CompactStep.SUMMARISING, 0
    )
    # while the summary is written, its size is told as it grows: the stream lasts
    # len(PIECES) * PIECE_S (about 1.6 s), so at least two updates SUMMARY_EVERY_S apart
    assert len(PIECES) * PIECE_S >= 3 * SUMMARY_EVERY_S
    growing = [c.written for c in compacting if c.step is CompactStep.SUMMARISING][1:]
    assert len(growing) >= 2, told
    assert growing == sorted(set(growing)), growing
    assert 0 < growing[-1] <= len(PIECES), growing
    # then the switch, the pre-warm and the server's reading of the new prefix, in that order
    rest = [
        c
        for c in told
        if not isinstance(c, CompactingEvent) or c.step is not CompactStep.SUMMARISING
    ]
    kinds = [c.step.value if isinstance(c, CompactingEvent) else c.TAG for c in rest]
    assert kinds == ["switching", "prewarming", "progress", "progress", "progress", "compacted"]
    switching = rest[0]
    assert isinstance(switching, CompactingEvent)
    assert switching.written == len(PIECES)  # the summary's whole size, once it is done
    progress = [p for p in rest if isinstance(p, ProgressEvent)]
    assert [p.processed for p in progress] == sorted(p.processed for p in progress)
    assert progress[-1].processed == progress[-1].total
    done = rest[-1]
    assert isinstance(done, CompactedEvent)
    assert (done.epoch, done.error, done.after) == (1, "", progress[-1].total)
