"""Real daemons as subprocesses in tests: start, read their lines, wait with a bound, stop.

Nothing here sleeps and hopes: every wait polls a condition and fails with a message that says
what it was waiting for, once its bound has passed.
"""

import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

# Seconds; never reached when healthy. A daemon's start is the longest wait it bounds: at load 17
# on 2 cores (make test beside two busy loops, issue 38.7) importing brokerd took 15-25 s (the
# MCP SDK 11 s of it), and 10 s failed every brokerd start.
DEFAULT_BOUND = 60.0


def short_tmpdir(prefix: str) -> Path:
    """A folder under /tmp: a Unix socket path may have at most 107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def wait_for(
    condition: Callable[[], T | None],
    what: str,
    timeout: float = DEFAULT_BOUND,
    interval: float = 0.005,
    error: Callable[[str], Exception] = AssertionError,
) -> T:
    """Polls `condition` until it returns something truthy and returns that, or fails.

    The one bounded wait of the tests, scripts/record.py and bench/ (`error` is what they raise
    when the bound passes: a test fails, a script reports).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise error(f"waited {timeout:g} s for {what}")
        time.sleep(interval)


def socket_accepts(path: str) -> bool:
    """True when a Unix stream socket at `path` takes a connection (which is closed at once)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def wait_for_socket(path: str, timeout: float = DEFAULT_BOUND) -> None:
    """Waits until a socket file exists at `path` (it does not connect: that would use a slot)."""

    def is_socket() -> bool:
        try:
            return stat.S_ISSOCK(os.lstat(path).st_mode)
        except FileNotFoundError:
            return False

    wait_for(is_socket, f"a socket file at {path}", timeout)


class Daemon:
    """A subprocess whose stdout and stderr lines are collected by reader threads as they come."""

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        self.lines: list[str] = []
        self.err_lines: list[str] = []
        self._changed = threading.Condition()
        self._open_streams = 2
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(
                target=self._read, args=(self.proc.stderr, self.err_lines), daemon=True
            ),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, stream: IO[str], into: list[str]) -> None:
        for line in stream:
            with self._changed:
                into.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._open_streams -= 1
            self._changed.notify_all()

    def wait_for_line(self, contains: str, timeout: float = DEFAULT_BOUND) -> str:
        """The first stdout line (seen so far or to come) containing `contains`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if contains in line:
                        return line
                if self._open_streams == 0:
                    raise AssertionError(
                        f"{self.argv[:4]} closed its output (exit code {self.proc.poll()}) "
                        f"without a line with {contains!r}; stdout {self.lines!r}, "
                        f"stderr {self.err_lines!r}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"waited {timeout:g} s for a line with {contains!r} from "
                        f"{self.argv[:4]}; stdout so far {self.lines!r}, "
                        f"stderr {self.err_lines!r}"
                    )
                self._changed.wait(left)

    def count_lines(self, contains: str) -> int:
        return sum(contains in line for line in self.lines)

    def _finish_readers(self) -> None:
        for reader in self._readers:
            reader.join(timeout=DEFAULT_BOUND)

    def wait(self, timeout: float = DEFAULT_BOUND) -> int:
        """Waits for the process to exit by itself; its exit code."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.argv[:4]} still running after {timeout:g} s") from None
        self._finish_readers()
        return code

    def send_signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = DEFAULT_BOUND) -> int:
        """Sends `signum` and waits for the exit; kills it if the bound passes (and fails)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            return self.wait(timeout)
        except AssertionError:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=DEFAULT_BOUND)
        self._finish_readers()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def python_module(module: str, *args: str) -> list[str]:
    """argv to run `python -m module args...` with this interpreter (the venv's)."""
    return [sys.executable, "-m", module, *args]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))
