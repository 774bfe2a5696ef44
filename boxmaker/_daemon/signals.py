"""SIGTERM and SIGINT through a self-pipe, so a daemon's select() loop wakes on them.

The handler only sets a flag; `signal.set_wakeup_fd` writes a byte to the pipe, which the loop
selects on beside its sockets. So a signal is handled between two accepts, never inside one, and
the loop needs no timeout to notice it.
"""

import contextlib
import os
import signal
from collections.abc import Iterator, Sequence
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The self-pipe: select on `read_fd`, then `drain()` it and look at `stopping`."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.stopping = False
        self.signum: int | None = None  # the first stop signal received

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        self.stopping = True

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.read_fd, 512):
                pass

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


@contextlib.contextmanager
def stop_signals(signums: Sequence[int] = STOP_SIGNALS) -> Iterator[StopSignals]:
    """Installs the handlers for `signums` (main thread only) and restores the old ones after."""
    stop = StopSignals()
    old_fd = signal.set_wakeup_fd(stop.write_fd, warn_on_full_buffer=False)
    old = {s: signal.signal(s, stop.on_signal) for s in signums}
    try:
        yield stop
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(old_fd)
        stop.close()
