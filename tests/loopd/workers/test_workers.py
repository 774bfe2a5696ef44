"""loopd's session workers as real processes: one per active session, idle exit, a worker or
loopd itself killed mid-turn, and the one slot gate that every worker shares."""

from __future__ import annotations

import os
import signal

from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.proto import ErrorCode, QueuedEvent, TurnDone, WireError
from tests.support.procs import wait_for
from tests.support.serve import (
    BOUND_S,
    START_LINE,
    ServeEnv,
    TurnClient,
    children,
    turn,
)
from tests.support.serve import (
    alive as _alive,
)


def user_contents(env: ServeEnv, session: str) -> list[str]:
    return [r["content"] for r in env.log_lines(session) if r["type"] == "user"]


def test_one_worker_per_active_session_and_idle_ones_exit(env: ServeEnv) -> None:
    daemon = env.start(worker_idle_ms=400, spare_worker=False)
    env.model.hold()
    clients = [TurnClient(env.socket, f"s{i}", "hi", resume=False) for i in range(3)]
    wait_for(lambda: env.model.waiting >= 1, "a session's chat request (two slots: up to two)")
    wait_for(lambda: len(children(daemon.pid)) == 3, "a worker per session")
    workers = children(daemon.pid)
    env.model.release()
    assert all(isinstance(c.result()[-1], TurnDone) for c in clients)
    # A second turn of a session goes to its worker, warm: still three.
    assert isinstance(turn(env.socket, "s0", "again")[-1], TurnDone)
    assert children(daemon.pid) == workers
    wait_for(lambda: not children(daemon.pid), "the idle workers to exit", BOUND_S)
    # The next turn starts a new worker, which resumes from the log.
    assert isinstance(turn(env.socket, "s0", "after idle")[-1], TurnDone)
    (new,) = children(daemon.pid)
    assert new not in workers
    assert user_contents(env, "s0") == ["hi", "again", "after idle"]
    assert env.record_types("s0").count("usage") == 3


def test_a_worker_killed_mid_turn_gives_internal_and_the_next_turn_resumes(
    env: ServeEnv,
) -> None:
    daemon = env.start(spare_worker=False)
    assert isinstance(turn(env.socket, "s", "first", resume=False)[-1], TurnDone)
    before = (env.home / "sessions" / "s" / "0.jsonl").read_bytes()
    env.model.hold()
    client = TurnClient(env.socket, "s", "doomed")
    wait_for(lambda: env.model.waiting, "the turn's chat request")
    (worker,) = children(daemon.pid)
    os.kill(worker, signal.SIGKILL)
    final = client.result()[-1]
    assert isinstance(final, WireError)
    assert final.code == ErrorCode.INTERNAL
    assert f"pid {worker}" in final.message
    assert "died mid-turn" in final.message
    assert "killed by signal 9" in final.message
    env.model.release()
    after = (env.home / "sessions" / "s" / "0.jsonl").read_bytes()
    assert after.startswith(before), "the log lost what it held"
    assert after.endswith(b"\n"), "a partial line in the log"
    frames = turn(env.socket, "s", "next")
    assert isinstance(frames[-1], TurnDone), frames
    assert user_contents(env, "s") == ["first", "doomed", "next"]
    assert env.record_types("s").count("usage") == 2


def test_loopd_killed_mid_turn_the_worker_finishes_and_a_restart_waits_for_it(
    env: ServeEnv,
) -> None:
    first = env.start(spare_worker=False)
    assert isinstance(turn(env.socket, "s", "one", resume=False)[-1], TurnDone)
    env.model.hold(only="two")
    client = TurnClient(env.socket, "s", "two")
    wait_for(lambda: env.model.waiting, "the turn's chat request")
    (orphan,) = children(first.pid)
    # SIGKILL: no drain, no clean-up. (Not Daemon.kill: it waits for EOF on loopd's stderr,
    # which the worker inherited and holds until it exits.)
    first.proc.kill()
    first.proc.wait(BOUND_S)
    assert client.result() == [] or not isinstance(client.result()[-1], TurnDone)
    second = env.start()  # removes the stale socket, passes the self-test, binds
    second.wait_for_line(START_LINE)
    assert _alive(orphan), "the worker did not outlive loopd"
    busy = turn(env.socket, "s", "three")
    assert isinstance(busy[-1], WireError), busy
    assert busy[-1].code == ErrorCode.SESSION_BUSY, busy
    assert isinstance(turn(env.socket, "other", resume=False)[-1], TurnDone)
    env.model.release()  # the orphan's turn completes, is logged, and the orphan exits
    wait_for(lambda: not _alive(orphan), "the old worker to exit after its turn")
    assert user_contents(env, "s") == ["one", "two"]
    assert env.record_types("s").count("usage") == 2
    frames = turn(env.socket, "s", "three")
    assert isinstance(frames[-1], TurnDone), frames
    assert user_contents(env, "s") == ["one", "two", "three"]


def test_two_sessions_share_the_slot_gate_in_order(env: ServeEnv) -> None:
    env.start()
    for s in ("a", "x", "b"):  # spread over the two slots (issue 19): a and b share one
        assert isinstance(turn(env.socket, s, "new", resume=False)[-1], TurnDone)
    slots = {s: env.log_lines(s)[0]["slot"] for s in ("a", "x", "b")}
    assert slots["a"] == slots["b"] != slots["x"], slots
    env.model.hold()
    a = TurnClient(env.socket, "a", "from a")
    wait_for(lambda: env.model.waiting == 1, "a's chat request")
    b = TurnClient(env.socket, "b", "from b")
    wait_for(lambda: QueuedEvent(1) in b.frames, "b to be queued behind a")
    assert env.model.waiting == 1, "b reached the server while a held the slot"
    env.model.release()
    assert isinstance(a.result()[-1], TurnDone)
    assert isinstance(b.result()[-1], TurnDone)
    assert a.frames.count(QueuedEvent(1)) == 0
    last_users = [
        body["messages"][-1]["content"]
        for r in env.fake.requests(CHAT_PATH)
        if isinstance(body := r.json, dict) and body["messages"][-1]["role"] == "user"
    ]
    assert last_users[-2:] == ["from a", "from b"]


def test_a_spare_worker_takes_a_new_sessions_first_turn_and_another_is_started(
    env: ServeEnv,
) -> None:
    daemon = env.start(worker_idle_ms=300)
    (spare,) = wait_for(lambda: children(daemon.pid), "the spare worker")
    assert isinstance(turn(env.socket, "s", "hi", resume=False)[-1], TurnDone)
    wait_for(lambda: len(children(daemon.pid)) == 2, "a new spare beside the session's worker")
    assert spare in children(daemon.pid), "the session's turn did not go to the spare"
    wait_for(lambda: spare not in children(daemon.pid), "the session's worker to exit idle")
    (second,) = children(daemon.pid)  # the spare: not stopped for being idle
    assert isinstance(turn(env.socket, "s", "again")[-1], TurnDone)  # resumed by the spare
    assert second in children(daemon.pid)
    assert user_contents(env, "s") == ["hi", "again"]


def test_a_worker_whose_session_did_not_open_is_stopped_at_once(env: ServeEnv) -> None:
    daemon = env.start(spare_worker=False)
    for _ in range(10):  # each sent on reading the last one's final frame
        frames = turn(env.socket, "missing", resume=True)
        assert isinstance(frames[-1], WireError)
        assert frames[-1].code == ErrorCode.NO_SUCH_SESSION, frames
    wait_for(lambda: not children(daemon.pid), "the workers of a missing session to exit")
    assert isinstance(turn(env.socket, "missing", resume=False)[-1], TurnDone)
    assert len(children(daemon.pid)) == 1  # a session that opened keeps its worker
