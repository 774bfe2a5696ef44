"""A real session worker with the test as loopd's main process (issue 24.3): the test answers the
worker's gate asks itself, so a grant can carry what the main process never should, and the
worker must still end every turn with a final frame, never with a traceback."""

from __future__ import annotations

import queue
import threading

import pytest

from boxmaker.loopd.config import read_config
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.workers import process
from boxmaker.loopd.workers.pool import Pool, TurnSink
from boxmaker.proto import (
    ContentEvent,
    ErrorCode,
    Turn,
    TurnDone,
    WireError,
    decode_body,
)
from boxmaker.proto.frame import Frame, FrameDecoder
from tests.support.loopd.main_side import MainSide
from tests.support.serve import BOUND_S, ServeEnv, turn_bytes


def test_a_count_no_log_line_can_hold_is_refused_where_it_enters_and_the_turn_goes_on(
    env: ServeEnv,
) -> None:
    """Issue 24.3: a cache note with a count past 2**63-1 crashed the worker at encode_line. The
    note is now checked where it enters (cache.policy's Note bounds every count), so the turn
    ends normally, the bad note is said once on stderr, and nothing unencodable is logged."""
    main = MainSide(read_config(env.write_config()), "s")
    try:
        assert isinstance(main.turn(turn_bytes("s", "hi", False))[-1], TurnDone)
        huge = {"kind": "saved", "slot": 0, "tokens": 2**63, "size": 1, "elapsed_us": 1}
        frames = main.turn(turn_bytes("s", "again", True), [huge])
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
    monkeypatch.setattr(process, "WORKER_MODULE", "tests.support.loopd.hostile_worker")
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
