"""A `cancel` frame after the turn stops it (issue 30): on a real `loopd serve`, the scripted
fake server's connection is closed (the generation cancelled there), the log keeps a `stopped`
record, the final frame is `error{stopped}`, and the session goes on. A client that only goes
away, or sends anything else, stops nothing."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from boxmaker.proto import ContentEvent, ErrorCode, TurnDone
from boxmaker.proto.channel import cancel_frame
from boxmaker.proto.wire import WireError
from tests.support.config import MODEL
from tests.support.fakeserver import Outcome
from tests.support.procs import wait_for
from tests.support.recorded import Recorded
from tests.support.replies import Reply, sse_reply
from tests.support.serve import (
    BOUND_S,
    ServeEnv,
    TurnClient,
    read_frames,
    serve_env,
    turn,
    turn_bytes,
)

SLOW = "slow please"
WORDS = 400  # at DELAY_S each: far past every bound here, so only a stop ends it
DELAY_S = 0.1


def slow(_request: Recorded) -> Reply:
    def chunk(delta: dict[str, Any]) -> dict[str, Any]:
        return {
            "choices": [{"finish_reason": None, "index": 0, "delta": delta}],
            "created": 1796011468,
            "id": "chatcmpl-slow",
            "model": MODEL,
            "object": "chat.completion.chunk",
        }

    events = [chunk({"role": "assistant", "content": None})]
    events += [chunk({"content": f"w{i} "}) for i in range(WORDS)]
    return sse_reply(events, delay_s=DELAY_S, done=False)


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        e.answer_message(SLOW, slow)
        e.start()
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
