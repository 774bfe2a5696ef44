"""loopd is never turned away for good by its own inferproxy (issue 18,
docs/decisions/proxy-budget.md): a burst of turns with `[cache] slot_save` on (the keeper's
calls beside each completion), then inferproxy's accept bucket emptied (burst 10, 2 a second,
the M2a brief's limits, unchanged), then `supervisorctl restart loopd`: the new loopd's
self-test meets a proxy that closes its connections unanswered, tries them again as a token
comes back, and starts; the next turn resumes. The whole stack is verify-device's (the real
local llama-server under the repository's supervisord config).
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator

import pytest

from boxmaker.verify.device import Run
from boxmaker.verify.stack import Stack
from tests.support.llama import ensure_built

TURNS = 10
BOUND = 300.0


@pytest.fixture
def stack() -> Iterator[Stack]:
    ensure_built()
    s = Stack(None, None, None)
    try:
        s.start()
        s.wait_loopd()
        yield s
    finally:
        s.stop()


def logs(stack: Stack) -> str:
    """The run folder's logs' last lines, for a failure's message."""
    out = []
    for name in ("loopd.log", "loopd.err.log", "supervisord.log", "inferproxy.log"):
        path = stack.run / name
        if path.exists():
            out.append(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
    return "\n".join(out)


def drain(stack: Stack) -> int:
    """Connects to infer.sock until inferproxy closes one at once (its bucket is empty); how many
    it took. Each closed right away: nothing is sent upstream."""
    for n in range(1, 50):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(stack.infer_sock))
            s.settimeout(0.2)
            try:
                refused = s.recv(1) == b""
            except TimeoutError:
                refused = False  # admitted: it waits for our request
        if refused:
            return n
    raise AssertionError("inferproxy never refused a connection: is its accept limit on?")


def test_a_restart_after_a_burst_finds_the_proxy_budget_empty_and_still_starts(
    stack: Stack,
) -> None:
    assert stack.table["cache"]["slot_save"] is True
    run = Run(stack, io.StringIO())
    for i in range(TURNS):
        done, error = run.say(f"Say the number {i}.")
        assert done is not None, error
    drain(stack)
    started = time.monotonic()
    restart = stack.ctl("restart", "loopd")
    assert restart.returncode == 0, restart.stdout + restart.stderr + logs(stack)
    assert restart.stdout.split("\n")[-2:] == ["loopd: started", ""], restart.stdout
    stack.wait_loopd()
    took = time.monotonic() - started
    refused = (stack.run / "inferproxy.log").read_text().count("refused a connection")
    assert refused >= 1  # the bucket was empty when the new loopd began
    done, error = run.say("Say goodbye.")
    assert done is not None, error
    log = (stack.run / "loopd.log").read_text()
    assert log.count("listening on") == 2, log[-2000:]
    print(f"restart after {TURNS} turns and an empty bucket: {took:.1f} s, {refused} refusals")
