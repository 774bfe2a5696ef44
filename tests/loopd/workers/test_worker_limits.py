"""loopd's workers at the edges (issue 24): a worker that cannot start, a bound on workers."""

from __future__ import annotations

import os
import resource

from boxmaker.proto import ErrorCode, TurnDone, WireError
from tests.loopd.serve_support import ServeEnv, children, turn
from tests.support.procs import wait_for


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
