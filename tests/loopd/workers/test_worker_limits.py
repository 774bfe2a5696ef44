"""loopd's workers at the edges (issue 24): a worker that cannot start, a bound on workers."""

from __future__ import annotations

import os
import resource
import threading
from typing import Any

from boxmaker.proto import ErrorCode, TurnDone, WireError
from tests.support.procs import wait_for
from tests.support.serve import ServeEnv, TurnClient, children, reply_bound_s, turn


def _fds(pid: int) -> set[int]:
    return {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}


def test_a_worker_that_cannot_start_leaks_no_pipe(env: ServeEnv) -> None:
    daemon = env.start(spare_worker=False, worker_idle_ms=100)
    assert isinstance(turn(env.socket, "warm", resume=False)[-1], TurnDone)
    wait_for(lambda: not children(daemon.pid), "the idle worker to exit")
    base = _fds(daemon.pid)
    limits = resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE)
    refused = 0
    # With the fd limit just past what loopd holds, the turn's connection takes one fd and the
    # worker's two pipes need four more: some of these limits let the first pipe through and
    # refuse the second (EMFILE), the case that leaked. (One fd only would refuse the accept.)
    for extra in range(2, 8):
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (max(base) + extra, limits[1]))
        try:
            last = turn(env.socket, f"s{extra}", resume=False)[-1]
        finally:
            resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, limits)
        if isinstance(last, WireError):
            assert last.code == ErrorCode.UNAVAILABLE, last
            assert "cannot start a session worker" in last.message, last
            refused += 1
        wait_for(lambda: not children(daemon.pid), "the worker that started to exit idle")
        wait_for(lambda: _fds(daemon.pid) <= base, f"loopd's fds back to {sorted(base)}")
    assert refused >= 2, "the limits did not refuse a worker's pipes"


def test_new_workers_run_the_config_loopd_started_with_not_the_edited_file(env: ServeEnv) -> None:
    daemon = env.start(spare_worker=False)
    path = env.folder / "loopd.toml"
    text = path.read_text()
    moved = env.folder / "home2"
    path.write_text(text.replace(str(env.home), str(moved)))  # edited after loopd started
    assert isinstance(turn(env.socket, "after-edit", resume=False)[-1], TurnDone)
    assert env.record_types("after-edit")[0] == "session_start"
    assert not moved.exists(), "the new worker read the edited file"
    path.write_text("not toml at all [")
    assert isinstance(turn(env.socket, "broken-file", resume=False)[-1], TurnDone)
    assert len(children(daemon.pid)) == 2


def test_past_max_workers_the_worker_idle_longest_is_retired_to_make_room(env: ServeEnv) -> None:
    daemon = env.start(spare_worker=False, max_workers=2)
    pids: dict[str, int] = {}
    for session in ("s0", "s1", "s2", "s3"):
        before = children(daemon.pid)
        assert isinstance(turn(env.socket, session, resume=False)[-1], TurnDone)
        now = children(daemon.pid)
        assert len(now) <= 2, f"{len(now)} workers with max_workers = 2"
        (pids[session],) = now - before
    assert children(daemon.pid) == {pids["s2"], pids["s3"]}  # s0, then s1: the longest idle
    assert isinstance(turn(env.socket, "s2", "again")[-1], TurnDone)  # still warm
    assert children(daemon.pid) == {pids["s2"], pids["s3"]}
    assert isinstance(turn(env.socket, "s0", "back")[-1], TurnDone)  # s3 made room: resumed
    assert pids["s2"] in children(daemon.pid)
    assert len(children(daemon.pid)) == 2


def test_when_every_worker_runs_a_turn_a_new_one_waits_then_is_refused(env: ServeEnv) -> None:
    daemon = env.start(spare_worker=False, max_workers=2, worker_wait_ms=1500)
    env.model.hold()
    busy = [TurnClient(env.socket, f"busy{i}", resume=False) for i in range(2)]
    wait_for(lambda: len(children(daemon.pid)) == 2, "a worker per busy session")
    wait_for(lambda: env.model.waiting >= 1, "a turn held at the model")
    refused = turn(env.socket, "third", resume=False)[-1]
    assert isinstance(refused, WireError), refused
    assert refused.code == ErrorCode.UNAVAILABLE
    assert "max_workers" in refused.message, refused
    assert "worker_wait_ms" in refused.message, refused
    assert len(children(daemon.pid)) == 2
    waiting = TurnClient(env.socket, "fourth", resume=False)  # waits for a worker to finish
    env.model.release()
    assert all(isinstance(c.result()[-1], TurnDone) for c in busy)
    assert isinstance(waiting.result()[-1], TurnDone)
    assert len(children(daemon.pid)) <= 2


def test_a_flood_of_new_sessions_never_passes_max_workers_and_every_turn_ends(
    env: ServeEnv,
) -> None:
    channel: dict[str, Any] = {"max_workers": 3, "worker_wait_ms": 60_000}
    daemon = env.start(**channel)  # the spare counts too
    bound = reply_bound_s(channel)  # a turn may wait worker_wait_ms for a worker (issue 29.9)
    most = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, len(children(daemon.pid)))
            done.wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        clients = [TurnClient(env.socket, f"f{i}", resume=False, bound_s=bound) for i in range(12)]
        ends = [c.result()[-1] for c in clients]
    finally:
        done.set()
        watcher.join(5.0)
    assert all(isinstance(end, TurnDone) for end in ends), ends
    assert 2 <= most <= 3, most
