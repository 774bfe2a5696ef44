"""`loopd serve` as a real process: the self-test gate, the socket file, the start line, SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import threading
from collections.abc import Iterator

import pytest

from boxmaker.proto import ContentEvent, TurnDone
from tests.support.procs import wait_for
from tests.support.serve import (
    BOUND_S,
    START_LINE,
    ServeEnv,
    alive,
    children,
    serve_env,
    turn,
)


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        yield e


def test_serve_starts_binds_0600_in_0700_and_names_the_compiled_modules(env: ServeEnv) -> None:
    daemon = env.start()
    line = daemon.wait_for_line(START_LINE)
    assert line.startswith(f"loopd: listening on {env.socket}, sse=c, chunked=c, slots 0,1")
    assert [ln for ln in daemon.lines if ln.startswith("loopd: selftest ok")] != []
    assert stat.S_IMODE(os.lstat(env.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(env.socket.parent).st_mode) == 0o700
    frames = turn(env.socket, "first", resume=False)
    assert frames[-1] == TurnDone(content="ok", usage=frames[-1].usage)  # type: ignore[union-attr]
    assert ContentEvent("ok") in frames
    assert daemon.stop() == 0
    assert not env.socket.exists(), "the socket file outlived the daemon"


def test_serve_refuses_to_start_when_the_self_test_fails(env: ServeEnv) -> None:
    env.fake.on(
        "GET",
        "/props",
        lambda r: __import__("tests.support.replies").support.replies.json_reply(
            200,
            {
                "chat_template": "another",
                "total_slots": 2,
                "default_generation_settings": {"n_ctx": 2048},
            },
        ),
    )
    daemon = env.start(wait=False)
    assert daemon.wait(BOUND_S) == 1
    assert any("FAILED  props" in ln for ln in daemon.lines), daemon.lines
    assert any("self-test FAILED (props)" in ln for ln in daemon.err_lines), daemon.err_lines
    assert not env.socket.exists()


def test_a_stale_socket_is_removed_before_the_self_test(env: ServeEnv) -> None:
    env.socket.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(env.socket))
    stale.close()  # a socket file nobody listens on: what a killed loopd leaves
    env.model.hold(selftest=True)  # the self-test's chat requests wait: loopd is inside it
    daemon = env.start(wait=False)
    wait_for(lambda: env.model.waiting, "the self-test's first chat request")
    assert not env.socket.exists(), "the stale socket was still there during the self-test"
    env.model.release()
    daemon.wait_for_line(START_LINE, BOUND_S)
    assert env.socket.exists()


# Issue 29.7: SIGHUP drains as SIGTERM does (before: loopd died at once, the client's connection
# closed with no final frame); with `+workers` the workers get it too, as from a terminal's
# hangup of the whole group, and the turn in flight still finishes.
@pytest.mark.parametrize(
    "how", ["SIGTERM", "SIGINT", "SIGHUP", "SIGHUP+workers", "SIGTERM+workers"]
)
def test_a_stop_signal_lets_a_turn_in_flight_finish_within_drain_ms(
    env: ServeEnv, how: str
) -> None:
    name, _, also = how.partition("+")
    signum = getattr(signal, name)
    daemon = env.start(drain_ms=5000)
    assert isinstance(turn(env.socket, "s", resume=False)[-1], TurnDone)
    env.model.hold()
    result: list[object] = []
    t = threading.Thread(target=lambda: result.extend(turn(env.socket, "s", "two")), daemon=True)
    t.start()
    wait_for(lambda: env.model.waiting, "the turn's chat request")
    workers = children(daemon.pid)
    assert len(workers) == 2  # the session's and the spare
    if also:
        for w in workers:
            os.kill(w, signum)
    daemon.send_signal(signum)
    wait_for(lambda: not env.socket.exists(), "loopd to stop accepting (socket removed)")
    env.model.release()
    t.join(BOUND_S)
    assert isinstance(result[-1], TurnDone)
    assert daemon.wait() == 0
    assert not any(alive(w) for w in workers), "a worker outlived loopd's stop"
    assert env.record_types("s").count("usage") == 2


def test_sigterm_cuts_a_turn_that_outlasts_drain_ms_and_logs_nothing_partial(
    env: ServeEnv,
) -> None:
    daemon = env.start(drain_ms=100)
    assert isinstance(turn(env.socket, "s", resume=False)[-1], TurnDone)
    before = (env.home / "sessions" / "s" / "0.jsonl").read_bytes()
    env.model.hold()
    result: list[object] = []
    t = threading.Thread(target=lambda: result.extend(turn(env.socket, "s", "two")), daemon=True)
    t.start()
    wait_for(lambda: env.model.waiting, "the turn's chat request")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0
    t.join(BOUND_S)
    final = result[-1]
    assert getattr(final, "code", None) == "unavailable", result
    after = (env.home / "sessions" / "s" / "0.jsonl").read_bytes()
    assert after.startswith(before)
    assert after.endswith(b"\n")
    env.model.release()


def test_sigterm_does_not_wait_for_a_connection_that_never_sends_its_turn(env: ServeEnv) -> None:
    daemon = env.start(first_frame_ms=600_000)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
        idle.settimeout(BOUND_S)
        idle.connect(str(env.socket))
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(BOUND_S) == 0  # not first_frame_ms later
        with contextlib.suppress(ConnectionResetError):  # ended either way
            assert idle.recv(1) == b""


LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


def test_serve_waits_while_the_server_loads_its_model(env: ServeEnv) -> None:
    from tests.support.replies import json_reply

    env.fake.expect("GET", "/props", json_reply(503, LOADING), json_reply(503, LOADING))
    daemon = env.start()  # one process: no exit and retry by supervisord
    loading = [ln for ln in daemon.lines if "is loading its model" in ln]
    assert len(loading) == 1, daemon.lines
    assert "HTTP 503" in loading[0]
    assert [ln for ln in daemon.lines if ln.startswith("loopd: selftest ok      props")] != []
    assert len(env.fake.requests("/props")) >= 3
    assert daemon.stop() == 0


def test_the_wait_for_a_loading_server_is_bounded_by_load_wait_ms() -> None:
    from boxmaker.loopd.llama.errors import HttpStatus, StreamClosedEarly
    from boxmaker.loopd.serve import LOAD_POLL_S, wait_until_loaded

    now = [0.0]
    asked: list[float] = []
    said: list[str] = []

    def props(err: Exception) -> object:
        asked.append(now[0])
        raise err

    def sleep(s: float) -> None:
        now[0] += s

    loading = HttpStatus(503, "Loading model")
    assert not wait_until_loaded(lambda: props(loading), 2000, said.append, lambda: now[0], sleep)
    assert asked == [i * LOAD_POLL_S for i in range(5)]  # 0, 0.5, ... 2.0: then it gives up
    assert len(said) == 1
    asked.clear()
    # Anything but "loading" ends the wait at once: the self-test reports it.
    assert wait_until_loaded(lambda: props(HttpStatus(404, "no")), 2000, said.append)
    assert wait_until_loaded(lambda: props(StreamClosedEarly("gone")), 2000, said.append)
    assert len(asked) == 2
