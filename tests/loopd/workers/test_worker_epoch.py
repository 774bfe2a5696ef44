"""A real session worker's slot asks carry its session's epoch (issue 21, for the cache keeper's
per-epoch save files): the test plays loopd's main process and reads every `gate_ask`; after
`/compact`, the pre-warm and the next turn ask in epoch 1."""

from __future__ import annotations

import os
import subprocess
import sys

from boxmaker.loopd.config import read_config
from boxmaker.loopd.workers.pipes import FrameReader, FrameWriter
from boxmaker.loopd.workers.wire import FINAL_KINDS, config_frame, gate_fields, gate_frame
from boxmaker.proto import TurnDone, decode_body
from tests.support.serve import BOUND_S, ServeEnv, turn_bytes
from tests.support.turn import say

LONG = "a long answer that fills the context. " * 20


def test_each_slot_ask_names_the_sessions_current_epoch(env: ServeEnv) -> None:
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "boxmaker.loopd.workers.worker", "--session", "s1"],
        stdin=down_r,
        stdout=up_w,
        stderr=subprocess.PIPE,
    )
    os.close(down_r)
    os.close(up_w)
    down, up = FrameWriter(down_w), FrameReader(up_r)
    source = read_config(env.write_config({"keep_turns": 1, "min_cut": 0.0, "at": 0.99}))
    down.send(config_frame(source.text, source.source, str(source.base_dir), dict(source.env)))
    asked: list[int | None] = []

    def run(content: str, resume: bool = True, compact: bool = False) -> object:
        down.send(turn_bytes("s1", content, resume, compact))
        while (frame := up.next()) is not None:
            if frame.kind == "gate_ask":
                asked.append(frame.body.get("epoch"))
                down.send(gate_frame("gate_grant", gate_fields(frame)[0]))
            elif frame.kind == "gate_release":
                down.send(gate_frame("gate_left", gate_fields(frame)[0]))
            elif frame.kind in FINAL_KINDS:
                return decode_body(frame)
        raise AssertionError("the worker ended before its final frame")

    try:
        env.model.load([say(LONG), say(LONG)])
        assert isinstance(run("first", resume=False), TurnDone)
        assert isinstance(run("second"), TurnDone)
        env.model.load([say("## Goal\ntest\n"), say("(pre-warm)"), say("third answer")])
        assert isinstance(run("/compact", compact=True), TurnDone)
        assert isinstance(run("third"), TurnDone)
    finally:
        down.close()
        try:
            proc.communicate(timeout=BOUND_S)
        finally:
            proc.kill()
        os.close(up.fd)
    # two turns in epoch 0, the summary (epoch 0), then the pre-warm and the turn in epoch 1
    assert asked == [0, 0, 0, 1, 1]
