"""kill -9 of a session worker at every point of a turn (issue 13 item 2), with real processes.

A turn that calls a tool appends six records: user, assistant (the call), usage, tool_result
(its `tool_result` event then goes out), assistant, usage (then `turn_done`). The worker is
killed at each append, at each of the three points crashpoint.py knows: before the write, between
the write and the fsync, after the fsync (before the event). Plus mid-stream (content sent to the
client, the completion not finished), and a Hypothesis family of turns with the crash anywhere.

The contract (docs/reliability.md): a record is acknowledged when its event (or the turn's final
frame) was sent, which is always after its fsync. A kill before the write leaves the log at the
last whole record; a kill between write and fsync leaves the whole line in the page cache, where
the kernel keeps it: on resume it is a valid, complete record that was never acknowledged, and the
next turn sees it. Nothing acknowledged is ever lost, and no partial line is ever left.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxmaker.proto import ContentEvent, TurnDone
from boxmaker.session.crashpoint import POINTS
from tests.support.procs import Daemon, wait_for
from tests.support.reliability.crash_rig import (
    Stall,
    arm,
    check_after_crash,
    clear_queue,
    died_mid_turn,
    disarm,
    fired,
    log_path,
    start_loopd,
    worker_of,
)
from tests.support.serve import ServeEnv, TurnClient, serve_env, turn
from tests.support.turn import calls, say

TOOL_TURN_APPENDS = 6  # user, assistant(call), usage, tool_result, assistant, usage
PLAIN_TURN_APPENDS = 3  # user, assistant, usage
TOOL_TURN_TYPES = ["user", "assistant", "usage", "tool_result", "assistant", "usage"]
EXAMPLES = int(os.environ.get("RELIABILITY_EXAMPLES", "6"))


class Rig:
    def __init__(self, env: ServeEnv, daemon: Daemon) -> None:
        self.env = env
        self.daemon = daemon
        self.plan = env.folder / "crash.plan"
        self.stall = Stall(env)
        self.names = itertools.count()

    def session(self, prefix: str) -> str:
        return f"{prefix}-{next(self.names)}"


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with serve_env() as env:
        plan = env.folder / "crash.plan"
        daemon = start_loopd(env, crash_plan=plan, spare_worker=False, worker_idle_ms=60_000)
        yield Rig(env, daemon)


def first_turn(rig: Rig, session: str) -> bytes:
    disarm(rig.plan)
    clear_queue(rig.env)
    frames = turn(rig.env.socket, session, "first", resume=False)
    assert isinstance(frames[-1], TurnDone), frames
    return log_path(rig.env, session).read_bytes()


@pytest.mark.parametrize("n", range(1, TOOL_TURN_APPENDS + 1))
@pytest.mark.parametrize("point", POINTS)
def test_kill_at_every_append_point(rig: Rig, point: str, n: int) -> None:
    env, session = rig.env, rig.session(f"{point}-{n}")
    before = first_turn(rig, session)
    arm(rig.plan, point, PLAIN_TURN_APPENDS + n)  # the worker's count includes the first turn
    env.model.load([calls(("clock", {})), say("noon")])
    frames = turn(env.socket, session, "what time is it?")
    assert fired(rig.plan), f"the crash plan did not fire: {frames}"
    assert died_mid_turn(frames), frames
    records = check_after_crash(env, session, before, frames)
    on_disk = n - 1 if point == "append_before_write" else n
    assert [r["type"] for r in records] == TOOL_TURN_TYPES[:on_disk], records


def test_kill_mid_stream_logs_nothing_partial(rig: Rig) -> None:
    env, session = rig.env, rig.session("mid-stream")
    before = first_turn(rig, session)
    env.model.load([say("a partial answer that never finishes")])
    rig.stall.armed = True
    client = TurnClient(env.socket, session, "tell me")
    wait_for(lambda: any(isinstance(f, ContentEvent) for f in client.frames), "content to stream")
    worker = worker_of(rig.daemon.pid, session)
    os.kill(worker, signal.SIGKILL)
    frames = client.result()
    assert died_mid_turn(frames), frames
    records = check_after_crash(env, session, before, frames)
    # The user's message, durable before the request; nothing of the half-streamed answer.
    assert [(r["type"], r.get("content")) for r in records] == [("user", "tell me")], records


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tools=st.lists(st.booleans(), min_size=1, max_size=3),
    point=st.sampled_from(POINTS),
    at=st.floats(0, 1, exclude_max=True),
)
def test_kill_anywhere_in_a_session(rig: Rig, tools: list[bool], point: str, at: float) -> None:
    """Turns with and without tool calls; the worker is killed inside the last one."""
    env, session = rig.env, rig.session("h")
    disarm(rig.plan)
    clear_queue(env)
    assert isinstance(turn(env.socket, session, "hello", resume=False)[-1], TurnDone)
    done = PLAIN_TURN_APPENDS
    for uses_tool in tools[:-1]:
        env.model.load([calls(("clock", {})), say("ok")] if uses_tool else [say("ok")])
        assert isinstance(turn(env.socket, session, "more")[-1], TurnDone)
        done += TOOL_TURN_APPENDS if uses_tool else PLAIN_TURN_APPENDS
    before = log_path(env, session).read_bytes()
    last = TOOL_TURN_APPENDS if tools[-1] else PLAIN_TURN_APPENDS
    arm(rig.plan, point, done + 1 + int(at * last))
    env.model.load([calls(("clock", {})), say("ok")] if tools[-1] else [say("ok")])
    frames = turn(env.socket, session, "the last one")
    assert fired(rig.plan), frames
    assert died_mid_turn(frames), frames
    check_after_crash(env, session, before, frames)
