"""A scripted fake loopd on a real Unix socket, for `bxctl chat` tests.

    with FakeLoopd(tmp_path / "loop.sock", [[event(ContentEvent("hi")), done("hi")]]) as fake:
        result = run_cli(main, ["chat", "--socket", fake.path, "--say", "hello"])
    assert fake.turns == [{"session": ..., "content": "hello", "resume": False}]

For each accepted connection, in order, it reads one frame (the turn), records its body in
`turns`, sends the next scripted reply's byte strings one by one, and closes. A reply is raw
bytes, so a test can send a malformed frame or stop before the final one. A connection beyond
the script gets an `internal` error frame that says so, and the test sees it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from boxmaker.proto import (
    ChannelBody,
    FrameError,
    TurnDone,
    TurnEvent,
    TurnUsage,
    channel_frame,
)
from boxmaker.proto.frame import CLOSED, NEED_DATA, FrameDecoder, error_frame
from boxmaker.proto.wire import ErrorCode, WireError
from tests.support.procs import wait_for

Reply = Sequence[bytes]

USAGE = TurnUsage(cache_n=10, prompt_n=20, predicted_n=5, reasoning_tokens=0, thinking_capped=False)


def event(ev: TurnEvent) -> bytes:
    return channel_frame(ev)


def done(content: str | None, usage: TurnUsage = USAGE) -> bytes:
    return channel_frame(TurnDone(content, usage))


def error(code: ErrorCode, message: str) -> bytes:
    return channel_frame(WireError(code, message))


def frames(*bodies: ChannelBody) -> list[bytes]:
    return [channel_frame(b) for b in bodies]


class FakeLoopd:
    """Serves `replies` in order, one per connection, on a thread; stop() (or the with block's
    end) closes the listener and joins the thread."""

    def __init__(self, path: Path, replies: Sequence[Reply]) -> None:
        self.path = path
        self.replies = list(replies)
        self.turns: list[dict[str, Any]] = []
        self.problems: list[str] = []  # what the fake saw go wrong on its side
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(8)
        self._listener.settimeout(0.05)  # so the thread sees stop() within that
        self._thread = threading.Thread(target=self._serve, name="fakeloopd", daemon=True)
        self._thread.start()

    def __enter__(self) -> FakeLoopd:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the fake loopd's thread did not stop"
        self._listener.close()

    def wait_turns(self, n: int) -> list[dict[str, Any]]:
        """Waits (bounded) until `n` turns have been recorded; returns them."""
        wait_for(lambda: len(self.turns) >= n, f"{n} turns at the fake loopd")
        with self._lock:
            return list(self.turns)

    def _serve(self) -> None:
        served = 0
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                reply = self.replies[served] if served < len(self.replies) else None
                served += 1
                self._one(conn, reply)

    def _one(self, conn: socket.socket, reply: Reply | None) -> None:
        decoder = FrameDecoder()
        try:
            while (got := decoder.next_frame()) is NEED_DATA:
                decoder.receive_data(conn.recv(65536))
        except (FrameError, OSError) as e:
            self.problems.append(f"reading the turn: {e}")
            return
        if got is CLOSED:
            self.problems.append("the client closed before sending a turn")
            return
        with self._lock:
            self.turns.append(got.body)
        if reply is None:
            reply = [error_frame(ErrorCode.INTERNAL, "the fake loopd has no reply scripted")]
        try:
            for chunk in reply:
                conn.sendall(chunk)
        except OSError as e:
            self.problems.append(f"sending the reply: {e}")
