"""bxctl chat on a real pty: the child's output collected by a thread, waits on what it shows."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import termios
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from boxmaker.proto.ids import SESSION_ID_RE
from tests.support.serve import BOUND_S, REPLY_BOUND_S, ServeEnv

CPR_QUERY = b"\x1b[6n"


PROMPT_READY = r"\x1b\[\?2004h"  # the editor turns bracketed paste on as it shows the prompt


# A turn's first event, or its end, can wait as long as loopd itself may (a worker to start, the
# slot gate, a silent stream: reply_bound_s); what comes after an event already seen (the next
# streamed word, the stop) is BOUND_S.
TURN_S = REPLY_BOUND_S


class Pty:
    """A child process on a pty, its output collected by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal
            try:
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        self._lock = threading.Lock()
        self._out = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.status: int | None = None

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._out += data
            if CPR_QUERY in data:  # answer as a terminal does: row 1, column 1
                for _ in range(data.count(CPR_QUERY)):
                    os.write(self.fd, b"\x1b[1;1R")

    @property
    def output(self) -> str:
        with self._lock:
            return self._out.decode("utf-8", "replace")

    def send(self, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        view = memoryview(raw)
        while view:
            n = os.write(self.fd, view[:4096])
            view = view[n:]

    def wait_output(self, pattern: str, since: int = 0, timeout: float = BOUND_S) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            found = re.compile(pattern).search(self.output, since)
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} on the terminal; it shows:\n{self.output!r}")
            time.sleep(0.02)

    def wait_exit(self, timeout: float = BOUND_S) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            time.sleep(0.02)
        raise AssertionError(f"bxctl chat did not exit; the terminal shows:\n{self.output!r}")

    def __enter__(self) -> Pty:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def bxctl_path() -> str:
    """The venv's bxctl (the worktree's own when no venv is active)."""
    bxctl = str(Path(os.environ.get("VIRTUAL_ENV", ".venv")) / "bin" / "bxctl")
    if not os.path.exists(bxctl):
        bxctl = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "bxctl")
    return bxctl


def bxctl_environ(env: ServeEnv, **more: str) -> dict[str, str]:
    """bxctl's whole environment on `env`'s sockets and home, and these more variables."""
    return {
        **more,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(env.folder),
        "TERM": "xterm-256color",
        "BOXMAKER_SOCKET": str(env.socket),
        "BOXMAKER_HOME": str(env.home),
        "BOXMAKER_RUN": str(env.folder / "no-run"),  # never the checkout's make run
        "BOXMAKER_CHAT_HISTORY": str(env.folder / "history"),
    }


def open_bxctl(env: ServeEnv, argv: Sequence[str], **more: str) -> Pty:
    """`bxctl <argv>` on a pty, with `env`'s sockets and home and these more variables."""
    return Pty([bxctl_path(), *argv], bxctl_environ(env, **more))


def open_chat(env: ServeEnv, *args: str) -> Pty:
    return open_bxctl(env, ["chat", *args])


@contextmanager
def chat_at_prompt(env: ServeEnv) -> Iterator[tuple[Pty, str]]:
    """A new `bxctl chat` at its first prompt, and its session's id; killed on the way out."""
    with open_chat(env) as term:
        sid = session_of(term)
        term.wait_output(PROMPT_READY)
        yield term, sid


def users(env: ServeEnv, session: str) -> list[str]:
    return [r["content"] for r in env.log_lines(session) if r["type"] == "user"]


def wait_users(env: ServeEnv, session: str, n: int) -> list[str]:
    deadline = time.monotonic() + TURN_S
    while time.monotonic() < deadline:
        path = env.home / "sessions" / session / "0.jsonl"
        if path.exists() and len(found := users(env, session)) >= n:
            return found
        time.sleep(0.05)
    raise AssertionError(f"the log of {session} did not get {n} user records")


def session_of(term: Pty) -> str:
    found = term.wait_output(r"new session (\S+)")
    sid = found.group(1)
    assert SESSION_ID_RE.fullmatch(sid)
    return sid
