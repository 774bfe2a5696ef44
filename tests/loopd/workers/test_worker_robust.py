"""A real session worker with the test as loopd's main process (issue 24.3): the test answers the
worker's gate asks itself, so a grant can carry what the main process never should, and the
worker must still end every turn with a final frame, never with a traceback."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from typing import Any

import pytest

from boxmaker.loopd.config import read_config
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.workers import process
from boxmaker.loopd.workers.pipes import FrameReader, FrameWriter
from boxmaker.loopd.workers.pool import Pool, TurnSink
from boxmaker.loopd.workers.wire import (
    FINAL_KINDS,
    RELAYED_KINDS,
    config_frame,
    gate_fields,
    gate_frame,
)
from boxmaker.proto import (
    ChannelBody,
    ContentEvent,
    ErrorCode,
    Turn,
    TurnDone,
    WireError,
    decode_body,
)
from boxmaker.proto.frame import Frame, FrameDecoder
from tests.support.serve import BOUND_S, ServeEnv, turn_bytes


class MainSide:
    """One worker process, its pipes, and the test playing loopd's main process."""

    def __init__(self, env: ServeEnv, session: str) -> None:
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "boxmaker.loopd.workers.worker", "--session", session],
            stdin=down_r,
            stdout=up_w,
            stderr=subprocess.PIPE,
        )
        os.close(down_r)
        os.close(up_w)
        self.down = FrameWriter(down_w)
        self.up = FrameReader(up_r)
        source = read_config(env.write_config())
        base_dir = str(source.base_dir)
        self.down.send(config_frame(source.text, source.source, base_dir, dict(source.env)))
        self.session = session

    def turn(self, content: str, resume: bool, notes: list[dict[str, Any]]) -> list[ChannelBody]:
        """One turn; every gate_grant carries `notes`. Its channel frames, the final one last."""
        self.down.send(turn_bytes(self.session, content, resume))
        out: list[ChannelBody] = []
        # A frame this side does not answer would hang the read: the worker is killed at the
        # bound, so the read ends in EOF and the test fails with what it has.
        watchdog = threading.Timer(BOUND_S, self.proc.kill)
        watchdog.start()
        try:
            return self._frames(out, notes)
        finally:
            watchdog.cancel()

    def _frames(self, out: list[ChannelBody], notes: list[dict[str, Any]]) -> list[ChannelBody]:
        while (frame := self.up.next()) is not None:
            if frame.kind == "gate_pick":
                ask = gate_fields(frame)[0]
                self.down.send(gate_frame("gate_picked", ask, slot=frame.body["slots"][0]))
            elif frame.kind == "gate_ask":
                ask = gate_fields(frame)[0]
                self.down.send(gate_frame("gate_grant", ask, cache=notes))
            elif frame.kind == "gate_release":
                self.down.send(gate_frame("gate_left", gate_fields(frame)[0]))
            elif frame.kind in RELAYED_KINDS:
                out.append(decode_body(frame))
                if frame.kind in FINAL_KINDS:
                    return out
        return out  # EOF: the worker died before its final frame

    def close(self) -> tuple[int, str]:
        self.down.close()
        try:
            _, err = self.proc.communicate(timeout=BOUND_S)
        finally:
            self.proc.kill()
        os.close(self.up.fd)
        return self.proc.returncode, err.decode()


def test_a_count_no_log_line_can_hold_is_refused_where_it_enters_and_the_turn_goes_on(
    env: ServeEnv,
) -> None:
    """Issue 24.3: a cache note with a count past 2**63-1 crashed the worker at encode_line. The
    note is now checked where it enters (cache.policy's Note bounds every count), so the turn
    ends normally, the bad note is said once on stderr, and nothing unencodable is logged."""
    main = MainSide(env, "s")
    try:
        assert isinstance(main.turn("hi", False, [])[-1], TurnDone)
        huge = {"kind": "saved", "slot": 0, "tokens": 2**63, "size": 1, "elapsed_us": 1}
        frames = main.turn("again", True, [huge])
    finally:
        code, err = main.close()
    assert frames, f"no final frame; the worker said: {err}"
    assert isinstance(frames[-1], TurnDone), frames
    assert "a bad cache note from loopd" in err, err
    assert "Traceback" not in err, err
    assert code == 0, err


def test_a_frame_the_relay_thread_cannot_act_on_ends_the_turn_with_an_error(
    env: ServeEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's relay thread, against a real child that sends a gate frame out of bounds."""
    monkeypatch.setattr(process, "WORKER_MODULE", "tests.loopd.workers.hostile_worker")
    config = read_config(env.write_config())
    pool = Pool(config, config.parse().channel, SlotGate(4))
    frames: queue.SimpleQueue[tuple[bytes, bool]] = queue.SimpleQueue()
    released = threading.Event()
    sink = TurnSink(deliver=lambda data, final: frames.put((data, final)), on_final=released.set)
    try:
        pool.start_turn(Turn("s", "hi", False), sink)
        got = [frames.get(timeout=BOUND_S)]
        while not got[-1][1]:
            got.append(frames.get(timeout=BOUND_S))
    finally:
        pool.stop(0.0)
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(data for data, _ in got))
    bodies = []
    while isinstance(frame := decoder.next_frame(), Frame):
        bodies.append(decode_body(frame))
    assert bodies[0] == ContentEvent("hello")
    last = bodies[-1]
    assert isinstance(last, WireError), bodies
    assert last.code == ErrorCode.INTERNAL
    assert "could not act on its frames" in last.message, last
    assert released.is_set()
