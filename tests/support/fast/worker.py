"""Threads for tests of blocking calls: run a call in the background, join it with a bound.

`Worker.started` lists every worker started since it was last cleared, so a fixture can wait for
a test's workers before closing the fds they use (tests/fast/conftest.py's `sockets`).
"""

import socket
import threading
from collections.abc import Callable
from typing import Any, ClassVar

BOUND_S = 30.0  # no correct run comes near this; it only turns a hang into a failure


class Worker:
    """Runs fn(*args) in a daemon thread; result() joins with a bound and re-raises its error."""

    # The running test's workers: the `sockets` fixture waits for them before closing any fd, so
    # none outlives its test and reads from an fd number the next test has reused.
    started: ClassVar[list["Worker"]] = []

    def __init__(self, name: str, fn: Callable[..., Any], *args: Any) -> None:
        self.name = name
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn, args), name=name, daemon=True)
        Worker.started.append(self)
        self.thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            self.value = fn(*args)
        except BaseException as exc:
            self.error = exc

    def result(self, timeout: float = BOUND_S) -> Any:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"{self.name} still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.value

    def failure(self, timeout: float = BOUND_S) -> BaseException:
        """The exception fn raised (fails the test if it returned instead)."""
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"{self.name} still running after {timeout} s")
        if self.error is None:
            raise AssertionError(f"{self.name} returned {self.value!r} instead of raising")
        return self.error


def receive_until_eof(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
