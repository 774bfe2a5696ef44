"""loopd's requests through a REAL inferproxy whose accept bucket is small (issue 18,
docs/decisions/proxy-budget.md). A connection over the budget is dropped unread (the client sees a
reset or a broken pipe: `Refused`), and loopd makes the request again as a token comes back: a
burst of short calls and a burst of completions each get every answer, with no retry event. A
completion whose upstream read the request and closed without answering is not a refusal:
ConnectFailed at once, as before (a short call, safe to repeat, is tried again either way:
verify-device's tee turns a refusal into such a close). A proxy that can reach no upstream drops
everything unread: Refused once load_wait_ms has passed, not before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import ConnectFailed, Refused
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.llama.transport import short_call
from boxmaker.loopd.llama.types import Completion
from tests.support.client import answer_chunks, make_config, run, slots_reply
from tests.support.fakeserver import FakeServer
from tests.support.inferproxy.proxy import closed_port, start_inferproxy
from tests.support.procs import Daemon
from tests.support.replies import End, Reply, json_reply, sse_reply

BOUND = 10.0
REFUSED_LINE = "refused a connection: accept rate limit"


@pytest.fixture
def upstream() -> Iterator[FakeServer]:
    with FakeServer(("127.0.0.1", 0)) as fake:
        fake.on("GET", "/props", json_reply(200, {"ok": True}))
        yield fake


def proxy(sock: Path, upstream: str, *flags: str) -> Daemon:
    return start_inferproxy(sock, upstream, *flags, bound=BOUND)


def small_bucket(sock_dir: Path, fake: FakeServer) -> tuple[Path, Daemon]:
    host, port = fake.address  # type: ignore[misc]
    sock = sock_dir / "infer.sock"
    return sock, proxy(sock, f"{host}:{port}", "--accept-burst", "2", "--accept-rate", "10")


def test_a_burst_of_short_calls_over_the_budget_is_refused_and_every_call_answered(
    sock_dir: Path, upstream: FakeServer
) -> None:
    sock, daemon = small_bucket(sock_dir, upstream)
    try:
        config = make_config(sock, load_wait_ms=5000, refused_retry_ms=100, control_timeout_ms=2000)
        answers = [short_call(config, "GET", "/props", None, time.monotonic) for _ in range(8)]
        assert [a.status for a in answers] == [200] * 8
        assert any(REFUSED_LINE in line for line in daemon.lines), daemon.lines
    finally:
        daemon.stop()


def test_a_burst_of_completions_over_the_budget_completes_without_a_retry_event(
    sock_dir: Path, upstream: FakeServer
) -> None:
    upstream.on("POST", CHAT_PATH, sse_reply(answer_chunks(["ok"])))
    upstream.on("GET", "/slots", slots_reply(busy=False))
    sock, daemon = small_bucket(sock_dir, upstream)
    try:
        # No retries of its own: a refusal must be absorbed below chat_with_retry.
        client = Client(make_config(sock, refused_retry_ms=100, control_timeout_ms=2000,
                                    retry_attempts=1, retry_delays_ms=[]))  # fmt: skip
        results = [run(client) for _ in range(8)]
        assert all(isinstance(r, Completion) for r, _, _ in results), results
        assert all(events == results[0][1] for _, events, _ in results)  # the same, no retrying
        assert any(REFUSED_LINE in line for line in daemon.lines), daemon.lines
    finally:
        daemon.stop()


def test_a_completion_whose_upstream_read_it_and_closed_is_not_retried_below(
    sock_dir: Path, upstream: FakeServer
) -> None:
    upstream.on("POST", CHAT_PATH, Reply(pieces=(), raw=True, end=End.CLOSE))
    host, port = upstream.address  # type: ignore[misc]
    sock = sock_dir / "infer.sock"
    daemon = proxy(sock, f"{host}:{port}")
    try:
        client = Client(make_config(sock, refused_retry_ms=100, control_timeout_ms=2000,
                                    retry_attempts=1, retry_delays_ms=[]))  # fmt: skip
        result, _, _ = run(client)
        assert isinstance(result, ConnectFailed), result
        assert not isinstance(result, Refused), result
        assert "closed the connection without answering" in str(result)
        assert len(upstream.requests(CHAT_PATH)) == 1
        # A short call that ends the same way is made again (safe: it changes nothing) until
        # load_wait_ms.
        upstream.on("GET", "/gone", Reply(pieces=(), raw=True, end=End.CLOSE))
        config = make_config(sock, load_wait_ms=300, refused_retry_ms=100, control_timeout_ms=2000)
        with pytest.raises(ConnectFailed, match="closed the connection without answering"):
            short_call(config, "GET", "/gone", None, time.monotonic)
        assert len(upstream.requests("/gone")) >= 2
    finally:
        daemon.stop()


def test_a_proxy_with_no_upstream_ends_in_refused_after_load_wait_ms(sock_dir: Path) -> None:
    sock = sock_dir / "infer.sock"
    daemon = proxy(sock, f"127.0.0.1:{closed_port()}")  # every connection dropped unread
    try:
        config = make_config(sock, load_wait_ms=600, refused_retry_ms=100, control_timeout_ms=2000)
        started = time.monotonic()
        with pytest.raises(Refused, match="without reading the request"):
            short_call(config, "GET", "/props", None, time.monotonic)
        took = time.monotonic() - started
        assert 0.6 <= took < 0.6 + BOUND
    finally:
        daemon.stop()
