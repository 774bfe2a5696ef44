"""bxctl chat's two bounds, against real `python -m boxmaker.bxctl chat` processes and a real Unix
socket: a loopd that never accepts (its backlog full), and one that sends a frame and then goes
silent mid-turn. Without the bounds both hung for ever."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.proto import ContentEvent, channel_frame

BOUND_S = 20.0  # a hang is what is tested; a healthy run is well under it


def chat(sock: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """A real bxctl chat --say; its exit status, stderr and how long it took."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    environ.update(env or {})
    began = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "boxmaker.bxctl", "chat", "--socket", str(sock), *args],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
            env=environ,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"bxctl chat {args} hung: no exit within {BOUND_S} s") from None
    return done.returncode, done.stderr, time.monotonic() - began


@contextlib.contextmanager
def wedged(path: Path) -> Iterator[None]:
    """A listener that never accepts, its backlog filled, so the next connect blocks."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    fillers: list[socket.socket] = []
    try:
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            fillers.append(s)
            try:
                s.connect(str(path))
            except BlockingIOError:
                break  # the backlog is full: a blocking connect would now wait
            assert len(fillers) < 100, "the backlog never filled"
        yield
    finally:
        for s in fillers:
            s.close()
        listener.close()


@contextlib.contextmanager
def goes_silent(path: Path) -> Iterator[None]:
    """Accepts, reads the turn, sends one content event, then says nothing until the end."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.recv(65536)
            conn.sendall(channel_frame(ContentEvent("thinking about it")))
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for c in held:
            c.close()
        listener.close()


def test_a_loopd_that_never_accepts_is_given_up_on_after_the_connect_bound(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "loop.sock"
    with wedged(sock):
        status, err, took = chat(sock, "--say", "hi", "--connect-timeout-ms", "300")
        assert status == 1, err
        assert f"loopd did not accept the connection at {sock} within 300 ms" in err
        assert took < BOUND_S / 2
        status, err, _ = chat(sock, "--say", "hi", env={"BOXMAKER_CHAT_CONNECT_MS": "200"})
        assert status == 1
        assert "within 200 ms" in err


def test_a_loopd_silent_mid_turn_is_given_up_on_after_the_silence_bound(tmp_path: Path) -> None:
    sock = tmp_path / "loop.sock"
    with goes_silent(sock):
        status, err, _ = chat(sock, "--say", "hi", "--silence-ms", "400")
        assert status == 1, err
        assert "loopd sent nothing for 400 ms during the turn (1 frames received)" in err
        assert "`bxctl verify`" in err
        status, err, _ = chat(sock, "--say", "hi", env={"BOXMAKER_CHAT_SILENCE_MS": "300"})
        assert status == 1
        assert "loopd sent nothing for 300 ms" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--silence-ms", "0"], "--silence-ms: expected a whole number of ms from 1 to"),
        (["--connect-timeout-ms", "-5"], "--connect-timeout-ms: expected a whole number"),
    ],
)
def test_a_bad_bound_is_a_usage_error(tmp_path: Path, args: list[str], says: str) -> None:
    status, err, _ = chat(tmp_path / "loop.sock", "--say", "hi", *args)
    assert status == 2
    assert says in err


def test_a_bad_bound_in_the_environment_is_a_usage_error(tmp_path: Path) -> None:
    status, err, _ = chat(
        tmp_path / "loop.sock", "--say", "hi", env={"BOXMAKER_CHAT_SILENCE_MS": "soon"}
    )
    assert status == 2
    assert "BOXMAKER_CHAT_SILENCE_MS: expected a whole number of ms" in err
