"""The brief's property (M2b section 10): every request of a session extends the one before.

Generated conversations (tests/loopd/turn/conversations.py) run:
1. through the sans-IO core alone, many of them, with the property checked on the requests the
   core builds and on `messages(baseline, records)` alone;
2. through the runner, the real client and the fake server, on a real session log, with the
   session closed and resumed from disk between turns, checked on the request bodies the fake
   server received;
3. with parallel tool calls on and off: the two logs are byte-identical, and so are the requests.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, note, settings

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.tools.registry import CALL_TOOL
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import ErrorCode, ToolResult, WireError
from boxmaker.session.store import SessionStore
from tests.support.fake_tools import FakeTools, fake_registry
from tests.support.fakeserver import FakeServer
from tests.support.loopd.conversations import (
    NOON,
    Conversation,
    TurnScript,
    check_log,
    check_replay,
    check_requests,
    conversations,
    drive_core,
)
from tests.support.turn import (
    BackwardsPort,
    StaggeredPort,
    Ticker,
    baseline,
    calls,
    chat_bodies,
    config_for,
    new_session,
    say,
    serve_model,
)


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_core_requests_extend_each_other(conv: Conversation) -> None:
    run = drive_core(conv)
    check_requests(run.requests)
    check_replay(baseline(), run.records, run.requests)
    check_log(conv, run.records)
    for outcome in run.outcomes:
        if isinstance(outcome, WireError):
            assert outcome.code in {ErrorCode.TURN_LIMIT, ErrorCode.SESSION_FULL}
            event(f"a turn ended with {outcome.code}")
    if any(isinstance(r, ToolResult) and r.truncated for r in run.records):
        event("a result was cut at the cap")
    event(f"{len(run.requests) // 5 * 5}+ requests")


class Place:
    """A fake server with the scripted model, and a home, in a short folder under /tmp."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bp-", dir="/tmp"))
        self.fake = FakeServer(self.dir / "infer.sock")
        self.model = serve_model(self.fake)
        self.home = self.dir / "home"

    def close(self) -> None:
        try:
            self.fake.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Place:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_conversation(
    place: Place, conv: Conversation, *, parallel: bool, port: Any = None
) -> bytes:
    """Every turn through run_turn on a real log; returns the log's bytes."""
    assert isinstance(place.fake.address, Path)
    config = config_for(place.fake.address, place.home, **conv.loop_config(parallel))
    client = Client(config.inference)
    port = port or FakeTools(clock=lambda: NOON)
    clock = Ticker()
    log = new_session(place.home)
    try:
        for turn in conv.turns:
            if turn.resume_before:
                log.close()
                log = SessionStore(place.home).open("s1")  # from disk: chain and baseline checked
            place.model.load(turn.completions)
            run_turn(
                log, turn.text, client=client, port=port, registry=fake_registry(),
                config=config.loop, thinking=turn.thinking, clock=clock,
            )  # fmt: skip
        check_log(conv, log.records)
        check_replay(baseline(), log.records, chat_bodies(place.fake))
        return log.log_path.read_bytes()
    finally:
        log.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations())
def test_requests_on_the_wire_extend_each_other_across_resumes(conv: Conversation) -> None:
    with Place() as place:
        run_conversation(place, conv, parallel=True)
        bodies = chat_bodies(place.fake)
        note(f"{len(bodies)} requests")
        check_requests(bodies)
        # What went on the wire is what the core alone builds for the same conversation.
        core = drive_core(conv)
        assert [b["messages"] for b in bodies] == [r["messages"] for r in core.requests]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations(max_turns=2))
def test_parallel_and_sequential_runs_log_the_same_bytes(conv: Conversation) -> None:
    with Place() as a, Place() as b:
        sequential = run_conversation(a, conv, parallel=False)
        parallel = run_conversation(
            b, conv, parallel=True, port=StaggeredPort(FakeTools(clock=lambda: NOON), 0.002)
        )
        assert parallel == sequential
        assert chat_bodies(a.fake) == chat_bodies(b.fake)


def test_parallel_batch_finishing_out_of_order_logs_in_call_order() -> None:
    texts = ["first", "second", "third", "fourth"]
    batch = calls(*[(CALL_TOOL, {"name": "echo", "arguments": {"text": t}}) for t in texts])
    conv = Conversation(8, True, 64, (TurnScript("Echo four.", True, False, (batch, say("ok"))),))
    with Place() as a, Place() as b:
        sequential = run_conversation(a, conv, parallel=False)
        port = BackwardsPort(FakeTools(clock=lambda: NOON), len(texts))
        parallel = run_conversation(b, conv, parallel=True, port=port)
        assert port.finished == [3, 2, 1, 0]  # they did run at once, and finished backwards
        assert parallel == sequential
        results = [line for line in parallel.splitlines() if b'"type":"tool_result"' in line]
        assert [orjson.loads(line)["content"] for line in results] == texts
