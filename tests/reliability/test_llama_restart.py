"""The REAL llama-server SIGKILLed mid-stream and started again on the same port (issue 13 item
2): the client's retry completes the turn through the same inferproxy, and the log holds the turn
once, whole: nothing of the cut stream, one Assistant and one Usage for the completion, the chain
intact. The next turn works.

The stack is this test's own (llama-server, inferproxy), never the session-scoped one the other
real-server tests share, since it is killed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import Assistant, ContentEvent, RetryingEvent, TurnDone, TurnEvent, Usage, User
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from boxmaker.verify.stack import healthy
from tests.support.fake_tools import FakeTools
from tests.support.procs import wait_for
from tests.support.stack import Stack
from tests.support.turn import new_session

READY_BOUND_S = 60.0  # the tiny model loads in a second or two; far more on a loaded machine
# Retries soon enough for a test, and long enough in all for the server to load again.
RETRY = {"retry_attempts": 5, "retry_delays_ms": [500, 1000, 2000, 4000], "retry_jitter": 0.0}


class Restarted:
    """The server's second life: the same argv (so the same port) in a process of our own."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, argv: list[str], log: Path) -> None:
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def stack() -> Iterator[Stack]:
    own = Stack("single")
    try:
        own.start()
        yield own
    finally:
        own.stop()


def test_llama_server_killed_mid_stream_and_restarted(stack: Stack) -> None:
    config = stack.config(inference={"max_tokens": 200} | RETRY)
    client = Client(config.inference)
    home = stack.dir / "home"
    again = Restarted()
    argv, port = list(stack.server.argv), stack.server.port
    events: list[TurnEvent] = []

    def on_event(event: TurnEvent) -> None:
        events.append(event)
        if isinstance(event, ContentEvent) and again.proc is None:
            stack.server.kill()  # SIGKILL mid-stream: the client's connection is cut
            again.start(argv, stack.dir / "llama-again.log")

    try:
        with new_session(home) as log:
            before = len(log.records)
            outcome = run_turn(
                log, "Tell me a long story about a lighthouse keeper.",
                client=client, port=FakeTools(), config=config.loop, thinking=False,
                on_event=on_event,
            )  # fmt: skip
            assert again.proc is not None, "the stream ended before any content: nothing cut"
            assert isinstance(outcome, TurnDone), outcome
            retries = [e for e in events if isinstance(e, RetryingEvent)]
            assert retries, events  # the cut stream was retried, not passed off as whole
            added = log.records[before:]
            # One User, then one Assistant + Usage: the cut attempt left nothing behind.
            assert [type(r) for r in added] == [User, Assistant, Usage], added
            assert isinstance(added[1], Assistant)
            assert added[1].content == outcome.content
            assert healthy("127.0.0.1", port)

            second = run_turn(
                log, "Thanks.", client=client, port=FakeTools(), config=config.loop,
                thinking=False,
            )  # fmt: skip
            assert isinstance(second, TurnDone), second
        assert verify_session(home, "s1").ok
        with SessionStore(home).open("s1") as reopened:
            assert len(reopened.records) == before + 6
    finally:
        again.stop()
        wait_for(
            lambda: not healthy("127.0.0.1", port), "the restarted server to go", READY_BOUND_S
        )
