"""loopd's side of exactly-once (M4 section 6): a turn whose client_ref the log holds is not run
again, through a real `loopd serve` on the scripted fake llama-server."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from boxmaker.proto import ChannelBody, ErrorCode, Turn, TurnDone, WireError, channel_frame
from boxmaker.proto.frame import encode_frame
from tests.support.procs import wait_for
from tests.support.serve import (
    BOUND_S,
    REPLY_BOUND_S,
    ServeEnv,
    connect,
    read_frames,
    serve_env,
    session_worker,
)
from tests.support.turn import say


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        yield e


def ref_turn(
    env: ServeEnv, session: str, content: str, ref: str | None, resume: bool
) -> list[ChannelBody]:
    with connect(env.socket, REPLY_BOUND_S) as sock:
        sock.sendall(channel_frame(Turn(session, content, resume, client_ref=ref)))
        return read_frames(sock)


def test_a_repeated_client_ref_gets_the_recorded_answer_and_runs_nothing(env: ServeEnv) -> None:
    env.start()
    env.model.load([say("the first answer")])
    first = ref_turn(env, "mm.chan1", "hello", "mm:post1", resume=False)
    assert isinstance(first[-1], TurnDone)
    assert first[-1].content == "the first answer"
    users = [r for r in env.log_lines("mm.chan1") if r["type"] == "user"]
    assert users[-1]["client_ref"] == "mm:post1"
    served, lines = env.model.served, env.log_lines("mm.chan1")
    env.model.load([say("a second run, which must not happen")])
    again = ref_turn(env, "mm.chan1", "hello", "mm:post1", resume=True)
    assert again == [first[-1]], "the recorded answer, alone, with the first turn's usage"
    assert env.model.served == served, "no completion was asked for"
    assert env.log_lines("mm.chan1") == lines, "nothing was appended"
    # another ref runs as a turn, and a turn without a ref writes no client_ref key
    other = ref_turn(env, "mm.chan1", "next", "mm:post2", resume=True)
    assert isinstance(other[-1], TurnDone)
    assert other[-1].content == "a second run, which must not happen"
    plain = ref_turn(env, "mm.chan1", "plain", None, resume=True)
    assert isinstance(plain[-1], TurnDone)
    last_user = [r for r in env.log_lines("mm.chan1") if r["type"] == "user"][-1]
    assert list(last_user) == ["type", "seq", "prev", "time", "content"]


def test_a_turn_cut_by_a_killed_worker_is_answered_interrupted_and_not_run(
    env: ServeEnv,
) -> None:
    daemon = env.start()
    ref_turn(env, "mm.chan2", "open", "mm:p0", resume=False)
    env.model.hold()
    sock = connect(env.socket, REPLY_BOUND_S)
    sock.sendall(channel_frame(Turn("mm.chan2", "run a long thing", True, client_ref="mm:p1")))
    wait_for(lambda: env.model.waiting == 1, "the turn's completion to be asked for", BOUND_S)
    os.kill(session_worker(daemon.pid, "mm.chan2"), signal.SIGKILL)  # the turn's crash
    with sock:
        cut = read_frames(sock)
    assert isinstance(cut[-1], WireError)
    # the model stays held: a completion asked for from here on would wait, and show in `waiting`
    users = [r for r in env.log_lines("mm.chan2") if r["type"] == "user"]
    assert users[-1]["client_ref"] == "mm:p1", "the User record was written before the request"
    served, lines = env.model.served, env.log_lines("mm.chan2")
    again = wait_for(
        lambda: _not_busy(ref_turn(env, "mm.chan2", "run a long thing", "mm:p1", resume=True)),
        "the session's lock to be free after its worker died",
        BOUND_S,
    )
    assert len(again) == 1
    assert isinstance(again[0], WireError)
    assert again[0].code is ErrorCode.INTERRUPTED
    assert "not run again" in again[0].message
    assert env.model.served == served, "no completion was asked for"
    assert env.model.waiting == 1, "only the killed turn's request is held"
    assert env.log_lines("mm.chan2") == lines


def _not_busy(frames: list[ChannelBody]) -> list[ChannelBody] | None:
    last = frames[-1]
    busy = isinstance(last, WireError) and last.code is ErrorCode.SESSION_BUSY
    return None if busy else frames


def test_a_bad_client_ref_is_refused_as_bad_request(env: ServeEnv) -> None:
    env.start()
    bad = {"session": "mm.chan3", "content": "hi", "resume": False, "client_ref": "a space"}
    body = encode_frame("turn", bad, True)
    with connect(env.socket, REPLY_BOUND_S) as sock:
        sock.sendall(body)
        frames = read_frames(sock)
    assert isinstance(frames[-1], WireError)
    assert frames[-1].code is ErrorCode.BAD_REQUEST
    assert "client_ref" in frames[-1].message
