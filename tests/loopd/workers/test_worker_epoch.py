"""A real session worker's slot asks carry its session's epoch (issue 21, for the cache keeper's
per-epoch save files): the test plays loopd's main process and reads every `gate_ask`; after
`/compact`, the pre-warm and the next turn ask in epoch 1."""

from __future__ import annotations

from boxmaker.loopd.config import read_config
from boxmaker.proto import TurnDone
from tests.support.loopd.main_side import MainSide
from tests.support.serve import ServeEnv, turn_bytes
from tests.support.turn import say

LONG = "a long answer that fills the context. " * 20


def test_each_slot_ask_names_the_sessions_current_epoch(env: ServeEnv) -> None:
    source = read_config(env.write_config({"keep_turns": 1, "min_cut": 0.0, "at": 0.99}))
    main = MainSide(source, "s1")

    def run(content: str, resume: bool = True, compact: bool = False) -> object:
        frames = main.turn(turn_bytes("s1", content, resume, compact))
        assert frames, "the worker ended before its final frame"
        return frames[-1]

    try:
        env.model.load([say(LONG), say(LONG)])
        assert isinstance(run("first", resume=False), TurnDone)
        assert isinstance(run("second"), TurnDone)
        env.model.load([say("## Goal\ntest\n"), say("(pre-warm)"), say("third answer")])
        assert isinstance(run("/compact", compact=True), TurnDone)
        assert isinstance(run("third"), TurnDone)
    finally:
        main.close()
    # two turns in epoch 0, the summary (epoch 0), then the pre-warm and the turn in epoch 1
    assert main.asked_epochs == [0, 0, 0, 1, 1]
