"""The whole stack for the load and soak tests (tests/reliability/test_load.py): the scripted
fake llama-server on TCP, a real inferproxy in front of it on infer.sock, and `loopd serve` on
loop.sock through it; plus a flood that keeps connections open on both sockets in rounds, and a
fault thread that SIGKILLs a random session worker now and then (soak only)."""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.fakeserver import FakeServer
from tests.support.inferproxy.proxy import start_inferproxy
from tests.support.procs import Daemon, short_tmpdir
from tests.support.reliability.flood import close_all, flood
from tests.support.serve import ServeEnv, children

MAX_PROXY_CONNECTIONS = 64
PROXY_LIMITS = (
    "--max-connections",
    str(MAX_PROXY_CONNECTIONS),
    "--accept-burst",
    "1000",
    "--accept-rate",
    "1000",
)


@dataclass
class Stack:
    env: ServeEnv
    proxy: Daemon


@contextmanager
def stack() -> Iterator[Stack]:
    folder = short_tmpdir("bl-")
    with FakeServer(("127.0.0.1", 0)) as fake:
        env = ServeEnv(folder, fake)
        host, port = fake.address  # type: ignore[misc]
        flags = ("--first-byte-timeout", "2", *PROXY_LIMITS)
        proxy = start_inferproxy(folder / "infer.sock", f"{host}:{port}", *flags, bound=15.0)
        try:
            yield Stack(env, proxy)
        finally:
            env.model.release()
            for daemon in env.daemons:
                daemon.stop()
            proxy.stop()


class Flood(threading.Thread):
    """Rounds of connections held open on each socket (path: how many), until stopped. Each round
    holds its connections for `hold_s` (a pacing, not a wait on a condition)."""

    def __init__(self, paths: dict[str, int], hold_s: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.paths, self.hold_s = paths, hold_s
        self.stopped = threading.Event()
        self.opened = self.missed = self.rounds = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            held = []
            for path, n in self.paths.items():
                socks, missed = flood(path, n, bound_s=1.0)
                held += socks
                self.opened += len(socks)
                self.missed += missed
            self.stopped.wait(self.hold_s)
            close_all(held)
            self.rounds += 1

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)


class Faults(threading.Thread):
    """SIGKILLs a random session worker of loopd every `every_s` on average, until stopped."""

    def __init__(self, loopd_pid: int, every_s: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.every_s, self.rng = loopd_pid, every_s, random.Random(seed)
        self.stopped = threading.Event()
        self.kills = 0

    def run(self) -> None:
        while not self.stopped.wait(self.rng.expovariate(1 / self.every_s)):
            workers = sorted(children(self.pid))
            if workers:
                try:
                    os.kill(self.rng.choice(workers), signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)
