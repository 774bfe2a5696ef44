"""chat_with_retry against the fake server: each retryable path ends in success after a
`Retrying` event; what is not retryable comes back at once; the attempts and the 5-minute cap.

The retry waits keep the brief's defaults (2 s, 8 s, 30 s ±25%, 5 min in all) and pass through a
FakeClock's sleep, which moves the clock instead of waiting. The other limits are the short ones.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import (
    BadResponse,
    HttpStatus,
    InferError,
    ThinkingOverrun,
    WaitTimeout,
)
from boxmaker.loopd.llama.info import CONTROL_PATH
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.llama.types import Completion
from boxmaker.proto import ContentEvent, RetryingEvent, WaitingEvent
from tests.support.client import (
    LOADING,
    RECORDINGS,
    REQ,
    SILENT,
    FakeClock,
    answer_chunks,
    at,
    chunk_obj,
    make_config,
    slots_reply,
)
from tests.support.fakeserver import FakeServer
from tests.support.recorded import Recorded
from tests.support.replies import End, Reply, json_reply, raw_reply, sse_reply

GOOD = sse_reply(answer_chunks(["fine"]))
JITTER = {1: (1500, 2500), 2: (6000, 10_000), 3: (22_500, 37_500)}  # 2 s, 8 s, 30 s ±25%


def retry_client(path: Path, clock: FakeClock, **keys: Any) -> Client:
    return Client(make_config(path, **keys), clock=clock, sleep=clock.sleep, rng=random.Random(4))


def run_retry(client: Client) -> tuple[Completion | InferError, list[Any]]:
    events: list[Any] = []
    try:
        result: Completion | InferError = client.chat_with_retry(REQ, events.append)
    except InferError as exc:
        result = exc
    return result, events


def retrying(events: list[Any]) -> list[RetryingEvent]:
    return [e for e in events if isinstance(e, RetryingEvent)]


def assert_one_retry_then_success(
    result: Completion | InferError, events: list[Any], clock: FakeClock, tag: str
) -> None:
    assert isinstance(result, Completion), result
    assert result.content == "fine"
    (retry,) = retrying(events)
    assert retry.attempt == 2
    assert retry.error.startswith(f"{tag}: ")
    low, high = JITTER[1]
    assert low <= retry.after_ms <= high
    assert clock.sleeps == [retry.after_ms / 1000]
    assert events[-1] == ContentEvent("fine")


def test_http_503_is_retried(fake: FakeServer) -> None:
    fake.expect("POST", CHAT_PATH, raw_reply((RECORDINGS / "loading.http").read_bytes()), GOOD)
    clock = FakeClock()
    result, events = run_retry(retry_client(at(fake), clock))
    assert_one_retry_then_success(result, events, clock, "http")
    assert "Loading model" in retrying(events)[0].error
    first, second = fake.requests(CHAT_PATH)
    assert first.body == second.body  # a retry sends the same bytes


def test_connect_failure_is_retried_once_the_proxy_is_back(sock_dir: Path) -> None:
    path = sock_dir / "infer.sock"
    servers: list[FakeServer] = []

    class Restart(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            server = FakeServer(path)  # inferproxy comes back while we wait
            server.on("POST", CHAT_PATH, GOOD)
            servers.append(server)

    clock = Restart()
    try:
        result, events = run_retry(retry_client(path, clock))
    finally:
        for server in servers:
            server.close()
    assert_one_retry_then_success(result, events, clock, "connect")
    assert "ENOENT" in retrying(events)[0].error


def test_stream_closed_early_is_retried(fake: FakeServer) -> None:
    cut = sse_reply([chunk_obj(content="par", predicted=1)], done=False, end=End.CUT)
    fake.expect("POST", CHAT_PATH, cut, GOOD)
    clock = FakeClock()
    result, events = run_retry(retry_client(at(fake), clock))
    assert_one_retry_then_success(result, events, clock, "stream_closed_early")
    # The partial attempt's deltas were shown; the completion holds only the retry's answer.
    assert ContentEvent("par") in events


def test_stalled_is_retried(fake: FakeServer) -> None:
    silent_after_one = sse_reply(
        [chunk_obj(content="par", predicted=1)], done=False, end=End.SILENCE
    )
    fake.expect("POST", CHAT_PATH, silent_after_one, GOOD)
    clock = FakeClock()
    result, events = run_retry(retry_client(at(fake), clock))
    assert_one_retry_then_success(result, events, clock, "stalled")


def test_load_timeout_is_retried(fake: FakeServer) -> None:
    loaded = threading.Event()

    def slots(_: Recorded) -> Reply:
        return slots_reply(busy=False) if loaded.is_set() else json_reply(503, LOADING)

    class Loads(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            loaded.set()

    fake.expect("POST", CHAT_PATH, SILENT, GOOD)
    fake.on("GET", "/slots", slots)
    clock = Loads()
    result, events = run_retry(retry_client(at(fake), clock))
    assert_one_retry_then_success(result, events, clock, "load_timeout")
    assert events[0] == WaitingEvent(slot_busy=False)


def test_four_attempts_then_the_last_error(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, json_reply(503, LOADING))
    clock = FakeClock()
    result, events = run_retry(retry_client(at(fake), clock))
    assert isinstance(result, HttpStatus)
    assert result.status == 503
    assert len(fake.requests(CHAT_PATH)) == 4
    retries = retrying(events)
    assert [r.attempt for r in retries] == [2, 3, 4]
    for n, retry in enumerate(retries, start=1):
        low, high = JITTER[n]
        assert low <= retry.after_ms <= high, (n, retry.after_ms)
    assert clock.sleeps == [r.after_ms / 1000 for r in retries]


def test_attempts_come_from_the_config(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, json_reply(503, LOADING))
    clock = FakeClock()
    client = retry_client(
        at(fake),
        clock,
        retry_attempts=2,
        retry_delays_ms=[100],
        retry_jitter=0.0,
    )
    result, events = run_retry(client)
    assert isinstance(result, HttpStatus)
    assert retrying(events) == [RetryingEvent(2, 100, retrying(events)[0].error)]
    assert len(fake.requests(CHAT_PATH)) == 2


def test_the_five_minute_cap(fake: FakeServer) -> None:
    # Each attempt "takes" 170 s of the clock (as a long load wait would). The first retry starts
    # at about 172 s; a second would start after 340 s, past 300 s: it is not made.
    clock = FakeClock()

    def slow_503(_: Recorded) -> Reply:
        clock.advance(170)
        return json_reply(503, LOADING)

    fake.on("POST", CHAT_PATH, slow_503)
    result, events = run_retry(retry_client(at(fake), clock))
    assert isinstance(result, HttpStatus)
    assert result.status == 503
    assert len(fake.requests(CHAT_PATH)) == 2
    assert [r.attempt for r in retrying(events)] == [2]
    assert len(clock.sleeps) == 1


def test_the_cap_from_config_stops_the_first_retry(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, json_reply(503, LOADING))
    clock = FakeClock()
    client = retry_client(at(fake), clock, retry_total_ms=1000)
    result, events = run_retry(client)  # the first wait (1.5 s or more) would pass 1 s
    assert isinstance(result, HttpStatus)
    assert retrying(events) == []
    assert clock.sleeps == []


# ---- what is not retried comes back at once ----


def setup_wait_timeout(fake: FakeServer) -> None:
    fake.on("POST", CHAT_PATH, SILENT)
    fake.on("GET", "/slots", slots_reply(busy=True))


def setup_thinking_overrun(fake: FakeServer) -> None:
    chunks = [chunk_obj(reasoning="r", predicted=i) for i in range(1, 20)]
    fake.on("POST", CHAT_PATH, sse_reply(chunks, done=False, end=End.SILENCE))
    fake.on("POST", CONTROL_PATH, json_reply(200, {"success": True}))


@pytest.mark.parametrize(
    ("setup", "error"),
    [
        (
            lambda f: f.on(
                "POST", CHAT_PATH, raw_reply((RECORDINGS / "too_long.http").read_bytes())
            ),
            HttpStatus,
        ),
        (lambda f: f.on("POST", CHAT_PATH, raw_reply(b"HTTP/2 200\r\n\r\n")), BadResponse),
        (setup_wait_timeout, WaitTimeout),
        (setup_thinking_overrun, ThinkingOverrun),
    ],
    ids=["http-400", "bad-response", "wait-timeout", "thinking-overrun"],
)
def test_not_retried(fake: FakeServer, setup: Any, error: type[InferError]) -> None:
    setup(fake)
    clock = FakeClock()
    client = retry_client(at(fake), clock, thinking_cap=5, thinking_overrun=4)
    result, events = run_retry(client)
    assert type(result) is error, result
    assert retrying(events) == []
    assert clock.sleeps == []
    assert len(fake.requests(CHAT_PATH)) == 1
