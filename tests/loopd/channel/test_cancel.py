"""A `cancel` frame after the turn stops it (issue 30): on a real `loopd serve`, the scripted
fake server's connection is closed (the generation cancelled there), the log keeps a `stopped`
record, the final frame is `error{stopped}`, and the session goes on. A client that only goes
away, or sends anything else, stops nothing."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from boxmaker.proto import ContentEvent, ErrorCode, TurnDone
from boxmaker.proto.channel import cancel_frame
from boxmaker.proto.wire import WireError
from tests.support.fakeserver import Outcome
from tests.support.procs import wait_for
from tests.support.recorded import Recorded
from tests.support.replies import Reply
from tests.support.serve import (
    BOUND_S,
    QUICK_POLL,
    REPLY_BOUND_S,
    ServeEnv,
    TurnClient,
    read_frames,
    serve_env,
    turn,
    turn_bytes,
)
from tests.support.turn import say, slow_stream

SLOW = "slow please"
WORDS = 400  # at DELAY_S each: far past every bound here, so only a stop ends it
DELAY_S = 0.1


def slow(_request: Recorded) -> Reply:
    return slow_stream([f"w{i} " for i in range(WORDS)], DELAY_S, "chatcmpl-slow")


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        e.answer_message(SLOW, slow)
        e.start(inference=QUICK_POLL)  # a cancel before the first byte seen within 0.5 s, not 5
        yield e


def streamed(client: TurnClient, n: int) -> None:
    wait_for(
        lambda: sum(isinstance(f, ContentEvent) for f in client.frames) >= n or None,
        f"{n} content events",
        BOUND_S,
    )


def closed_by_loopd(env: ServeEnv) -> None:
    wait_for(
        lambda: any(c.outcome is Outcome.CLIENT_CLOSED for c in env.fake.connections()) or None,
        "loopd to close the server's connection",
        BOUND_S,
    )


def test_a_cancel_mid_answer_stops_it_and_the_log_says_so(env: ServeEnv) -> None:
    turn(env.socket, "s1", "first", resume=False)
    client = TurnClient(env.socket, "s1", SLOW)
    streamed(client, 3)
    client.sock.sendall(cancel_frame())
    frames = client.result()
    final = frames[-1]
    assert isinstance(final, WireError), frames
    assert final.code is ErrorCode.STOPPED
    closed_by_loopd(env)
    last = env.log_lines("s1")[-1]
    assert last["type"] == "stopped"
    shown = "".join(f.text for f in frames if isinstance(f, ContentEvent))
    assert last["shown"].startswith(shown[: len("w0 w1 w2 ")])
    assert len(last["shown"].split()) < WORDS
    after = turn(env.socket, "s1", "and then?")  # the session goes on
    assert isinstance(after[-1], TurnDone), after
    assert env.record_types("s1")[-4:] == ["stopped", "user", "assistant", "usage"]


def test_a_cancel_before_the_first_byte_stops_it_too(env: ServeEnv) -> None:
    turn(env.socket, "s1", "first", resume=False)
    env.model.hold()
    client = TurnClient(env.socket, "s1", "held")
    wait_for(lambda: env.model.waiting or None, "the request to be held", BOUND_S)
    client.sock.sendall(cancel_frame())
    final = client.result()[-1]
    assert isinstance(final, WireError)
    assert final.code is ErrorCode.STOPPED
    last = env.log_lines("s1")[-1]
    assert (last["type"], last["shown"]) == ("stopped", "")
    env.model.release()


def test_a_cancel_after_the_turn_ended_stops_nothing_later(env: ServeEnv) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(BOUND_S)
        sock.connect(str(env.socket))
        sock.sendall(turn_bytes("s1", "quick", False))
        assert isinstance(read_frames(sock)[-1], TurnDone)
        with contextlib.suppress(OSError):  # too late: the connection's turn is over
            sock.sendall(cancel_frame())
    again = turn(env.socket, "s1", "next")
    assert isinstance(again[-1], TurnDone), again
    assert "stopped" not in env.record_types("s1")


def test_a_client_that_goes_away_stops_nothing(env: ServeEnv) -> None:
    turn(env.socket, "s1", "first", resume=False)
    env.model.hold()
    client = TurnClient(env.socket, "s1", "left behind")
    wait_for(lambda: env.model.waiting or None, "the request to be held", BOUND_S)
    client.sock.shutdown(socket.SHUT_RDWR)
    env.model.release()
    wait_for(
        lambda: env.record_types("s1")[-2:] == ["assistant", "usage"] or None,
        "the turn to finish and be logged",
        BOUND_S,
    )
    assert "stopped" not in env.record_types("s1")


@pytest.mark.parametrize(
    "extra",
    [b"garbage\n", b'{"kind":"cancel"}', b"\x00\x00\x00\x05hello"],
    ids=["text", "not framed", "a bad frame"],
)
def test_anything_but_a_cancel_stops_nothing(env: ServeEnv, extra: bytes) -> None:
    turn(env.socket, "s1", "first", resume=False)
    env.model.hold()
    client = TurnClient(env.socket, "s1", "go on")
    wait_for(lambda: env.model.waiting or None, "the request to be held", BOUND_S)
    client.sock.sendall(extra)
    env.model.release()
    final = client.result()[-1]
    assert isinstance(final, TurnDone), final
    assert "stopped" not in env.record_types("s1")


# ---- a cancel stops its own turn, never the next one (issue 38.1) --------------------------------

# Streamed, then sent again in turn_done: 600 KB, over the socket's buffers (about 200 KiB), so a
# client that does not read holds its turn's relay in sendall after the worker has finished it.
# (One SSE line under [inference]'s line bound.)
LONG = "x" * 300_000
NEXT = "the next turn"
SEND_TIMEOUT_MS = 600_000  # the paused reader must outlast the test: only the test ends it


def start_when_free(env: ServeEnv, session: str, content: str) -> TurnClient:
    """A turn on `session` once its lock is free: one answered `session_busy` is sent again."""

    def started() -> TurnClient | None:
        client = TurnClient(env.socket, session, content)
        got = wait_for(lambda: client.frames or env.model.waiting or None, "busy, or held", BOUND_S)
        if got is not client.frames:
            return client
        busy = client.result()[-1]
        assert isinstance(busy, WireError), busy
        assert busy.code is ErrorCode.SESSION_BUSY
        return None

    return wait_for(started, f"a turn on {session} to start", BOUND_S)


def test_a_late_cancel_from_a_paused_reader_stops_nothing_of_the_next_turn() -> None:
    """Two chats on one session: A's turn has ended but its last frames wait for A's reader;
    B's turn runs; A's owner presses Ctrl-C. B's turn is not A's: it ends as it would have."""
    with serve_env() as env:
        env.start(spare_worker=False, send_timeout_ms=SEND_TIMEOUT_MS)
        turn(env.socket, "s1", "first", resume=False)
        env.model.load([say(LONG)])
        with socket.socket(socket.AF_UNIX) as a:
            a.settimeout(REPLY_BOUND_S)
            a.connect(str(env.socket))
            a.sendall(turn_bytes("s1", "a long answer", True))  # and A does not read
            wait_for(
                lambda: env.record_types("s1").count("usage") == 2 or None,
                "A's turn to be logged",
                REPLY_BOUND_S,
            )
            env.model.hold(only=NEXT)
            b = start_when_free(env, "s1", NEXT)
            a.sendall(cancel_frame())
            env.daemons[0].wait_for_line("session s1: the client", BOUND_S)
            env.model.release()
            final_b = b.result()[-1]
            frames_a = read_frames(a)
        assert isinstance(final_b, TurnDone), final_b
        assert isinstance(frames_a[-1], TurnDone), frames_a[-1]
        assert "stopped" not in env.record_types("s1")
