"""The channel on a real loop.sock, served by a real `loopd serve` (M2b section 6).

Every kind and every error code reached; events in order on one connection; session_busy; the
next turn sent on reading the final frame always accepted; a client that goes away or stops
reading does not stop its turn, nor hold up another session.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from boxmaker.proto import (
    CacheLossEvent,
    ContentEvent,
    ErrorCode,
    ReasoningEvent,
    ToolCallStartedEvent,
    ToolResultEvent,
    TurnDone,
    WireError,
)
from tests.support.procs import wait_for
from tests.support.serve import ServeEnv, TurnClient, connect, read_frames, turn, turn_bytes
from tests.support.turn import Said, calls, say


def code(frames: Sequence[object]) -> ErrorCode | None:
    last = frames[-1]
    return last.code if isinstance(last, WireError) else None


def test_events_arrive_in_order_on_one_connection_then_turn_done(env: ServeEnv) -> None:
    env.start()
    env.model.load(
        [
            Said(
                content="let me look", reasoning="the clock knows", calls=calls(("clock", {})).calls
            ),
            Said(content="it is noon", cache_n=0),  # a cache loss on purpose
        ]
    )
    frames = turn(env.socket, "s1", "what time is it?", resume=False)
    kinds = [type(f).__name__ for f in frames]
    assert kinds == [
        "ReasoningEvent",
        "ContentEvent",
        "ToolCallStartedEvent",
        "ToolResultEvent",
        "ContentEvent",
        "CacheLossEvent",  # known once the completion's timings are in
        "TurnDone",
    ], frames
    assert frames[0] == ReasoningEvent("the clock knows")
    assert frames[1] == ContentEvent("let me look")
    assert frames[2] == ToolCallStartedEvent("clock")
    assert isinstance(frames[3], ToolResultEvent)
    assert frames[3].name == "clock"
    assert frames[4] == ContentEvent("it is noon")
    assert isinstance(frames[5], CacheLossEvent)
    assert frames[5].got == 0
    assert isinstance(frames[-1], TurnDone)
    assert frames[-1].content == "it is noon"


def test_each_error_code_a_turn_can_end_with(env: ServeEnv) -> None:
    env.start(loop={"tool_iterations": 1})
    assert code(turn(env.socket, "nope", resume=True)) == ErrorCode.NO_SUCH_SESSION
    assert isinstance(turn(env.socket, "s", resume=False)[-1], TurnDone)
    assert code(turn(env.socket, "s", resume=False)) == ErrorCode.SESSION_EXISTS
    env.model.load([Said(status=400)])
    assert code(turn(env.socket, "s")) == ErrorCode.SESSION_FULL
    env.model.load([Said(status=500)])
    assert code(turn(env.socket, "s")) == ErrorCode.INFERENCE
    env.model.load([calls(("clock", {})), calls(("clock", {}), prefix="again")])
    assert code(turn(env.socket, "s")) == ErrorCode.TURN_LIMIT
    env.model.load([say("still here")])
    frames = turn(env.socket, "s")
    assert isinstance(frames[-1], TurnDone)
    assert frames[-1].content == "still here"
    # A brand-new session after a refused create works too (its worker exited).
    assert code(turn(env.socket, "nope", resume=True)) == ErrorCode.NO_SUCH_SESSION
    assert isinstance(turn(env.socket, "nope", resume=False)[-1], TurnDone)


def test_a_second_client_on_a_busy_session_gets_session_busy_at_once(env: ServeEnv) -> None:
    env.start()
    assert isinstance(turn(env.socket, "s", resume=False)[-1], TurnDone)
    env.model.hold()
    first = TurnClient(env.socket, "s", "one")
    wait_for(lambda: env.model.waiting, "the first turn's chat request")
    started = time.monotonic()
    second = turn(env.socket, "s", "two")
    assert code(second) == ErrorCode.SESSION_BUSY
    assert len(second) == 1
    assert time.monotonic() - started < 1.0, "session_busy was not answered at once"
    env.model.release()
    assert isinstance(first.result()[-1], TurnDone)


def test_the_next_turn_sent_on_reading_the_final_frame_is_never_refused(env: ServeEnv) -> None:
    env.start()
    assert isinstance(turn(env.socket, "s", resume=False)[-1], TurnDone)
    outcomes = [type(turn(env.socket, "s", f"turn {i}")[-1]).__name__ for i in range(50)]
    assert outcomes == ["TurnDone"] * 50
    # Errors are final frames too: the lock is free when an error is read.
    for _ in range(10):
        env.model.load([Said(status=400)])
        assert code(turn(env.socket, "s")) == ErrorCode.SESSION_FULL
    assert code(turn(env.socket, "s", resume=False)) == ErrorCode.SESSION_EXISTS
    assert isinstance(turn(env.socket, "s")[-1], TurnDone)


def test_a_client_that_disconnects_mid_turn_does_not_stop_the_turn(env: ServeEnv) -> None:
    env.start()
    assert isinstance(turn(env.socket, "s", resume=False)[-1], TurnDone)
    env.model.hold()
    with connect(env.socket) as sock:
        sock.sendall(turn_bytes("s", "gone", True))
        wait_for(lambda: env.model.waiting, "the turn's chat request")
    env.model.release()
    wait_for(lambda: env.record_types("s").count("usage") == 2, "the turn to be logged")
    users = [r["content"] for r in env.log_lines("s") if r["type"] == "user"]
    assert users[-1] == "gone"
    assert isinstance(turn(env.socket, "s")[-1], TurnDone)


def test_a_client_that_stops_reading_holds_up_nothing_else(env: ServeEnv) -> None:
    env.start(send_timeout_ms=200)
    assert isinstance(turn(env.socket, "big", resume=False)[-1], TurnDone)
    big = "x" * 900_000  # more than the socket's buffers hold
    env.model.load([say(big)])
    stuck = connect(env.socket)  # sends its turn, then never reads
    stuck.sendall(turn_bytes("big", "a big answer", True))
    wait_for(lambda: env.record_types("big").count("usage") == 2, "the stuck client's turn logged")
    for i in range(3):
        assert isinstance(turn(env.socket, f"other{i}", resume=False)[-1], TurnDone)
    # Its turn finished and the lock came back, though the client never read a byte.
    assert isinstance(turn(env.socket, "big")[-1], TurnDone)
    stuck.close()


def test_a_client_that_sends_nothing_is_closed_after_first_frame_ms(env: ServeEnv) -> None:
    env.start(first_frame_ms=150)
    with connect(env.socket) as sock:
        started = time.monotonic()
        frames = read_frames(sock)
        waited = time.monotonic() - started
        assert sock.recv(1) == b""
    assert code(frames) == ErrorCode.BAD_REQUEST
    assert "first_frame_ms" in frames[0].message  # type: ignore[union-attr]
    assert 0.15 <= waited < 2.0
