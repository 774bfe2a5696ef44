"""loopd's short calls through a REAL inferproxy whose accept bucket is small (issue 18,
docs/decisions/proxy-budget.md): a burst of calls over the budget is refused by the proxy (closed
unanswered, its log says so) and every call still gets its answer, a token later; a proxy that
closes every connection unanswered (its upstream gone) ends in Unanswered once load_wait_ms has
passed, not before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.loopd.llama.errors import Unanswered
from boxmaker.loopd.llama.transport import short_call
from tests.inferproxy.conftest import closed_port
from tests.loopd.client_support import make_config
from tests.support.fakeserver import FakeServer
from tests.support.procs import Daemon, python_module, wait_for_socket
from tests.support.replies import json_reply

BOUND = 10.0


@pytest.fixture
def upstream() -> Iterator[FakeServer]:
    with FakeServer(("127.0.0.1", 0)) as fake:
        fake.on("GET", "/props", json_reply(200, {"ok": True}))
        yield fake


def proxy(sock: Path, upstream: str, *flags: str) -> Daemon:
    daemon = Daemon(python_module("boxmaker.inferproxy", "--listen", str(sock),
                                  "--upstream", upstream, *flags))  # fmt: skip
    daemon.wait_for_line("inferproxy: listening on", BOUND)
    wait_for_socket(str(sock), BOUND)
    return daemon


def test_a_burst_over_the_accept_budget_is_refused_and_every_call_answered(
    sock_dir: Path, upstream: FakeServer
) -> None:
    host, port = upstream.address  # type: ignore[misc]
    sock = sock_dir / "infer.sock"
    daemon = proxy(sock, f"{host}:{port}", "--accept-burst", "2", "--accept-rate", "10")
    try:
        config = make_config(sock, load_wait_ms=5000, refused_retry_ms=100, control_timeout_ms=2000)
        answers = [short_call(config, "GET", "/props", None, time.monotonic) for _ in range(8)]
        assert [a.status for a in answers] == [200] * 8
        assert any("refused a connection: accept rate limit" in line for line in daemon.lines), (
            daemon.lines
        )
    finally:
        daemon.stop()


def test_a_proxy_that_never_answers_ends_in_unanswered_after_load_wait_ms(sock_dir: Path) -> None:
    sock = sock_dir / "infer.sock"
    daemon = proxy(sock, f"127.0.0.1:{closed_port()}")  # every connection: upstream refused
    try:
        config = make_config(sock, load_wait_ms=600, refused_retry_ms=100, control_timeout_ms=2000)
        started = time.monotonic()
        with pytest.raises(Unanswered, match="closed the connection without answering"):
            short_call(config, "GET", "/props", None, time.monotonic)
        took = time.monotonic() - started
        assert 0.6 <= took < 0.6 + BOUND
    finally:
        daemon.stop()
