"""boxmaker.loopd.llama.retry: the retryable table, the schedule with its jitter, the attempts
and the total cap. Instant: time and randomness are parameters."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from boxmaker.loopd.llama.errors import (
    BadResponse,
    Busy,
    ConnectFailed,
    HttpStatus,
    InferError,
    LoadTimeout,
    Stalled,
    StreamClosedEarly,
    ThinkingOverrun,
    WaitTimeout,
)
from boxmaker.loopd.llama.retry import RETRYABLE, RETRYABLE_STATUSES, RetryPolicy, is_retryable
from tests.support.client import make_config

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"


DEFAULT = RetryPolicy(attempts=4, delays_ms=(2000, 8000, 30_000), jitter=0.25, total_ms=300_000)


class Extreme:
    """An rng that always returns one end of the range."""

    def __init__(self, high: bool) -> None:
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


def error_of(cls: type[InferError]) -> InferError:
    return HttpStatus(503, "x") if cls is HttpStatus else cls("x")


def test_policy_defaults_come_from_config(sock_dir: Path) -> None:
    assert RetryPolicy.from_config(make_config(sock_dir / "s")) == DEFAULT


def test_the_table_is_the_briefs_list() -> None:
    assert set(RETRYABLE) == {ConnectFailed, StreamClosedEarly, Stalled, LoadTimeout}
    assert {503} == RETRYABLE_STATUSES


KINDS = InferError.__subclasses__()  # every kind, so a new one cannot be left out of the table


@pytest.mark.parametrize("cls", KINDS, ids=[c.TAG for c in KINDS])
def test_every_error_kind_has_a_decision(cls: type[InferError]) -> None:
    expected = cls in RETRYABLE or cls is HttpStatus  # HttpStatus here is a 503
    assert is_retryable(error_of(cls)) is expected


@pytest.mark.parametrize("status", [400, 404, 500, 502, 504])
def test_other_statuses_are_not_retried(status: int) -> None:
    assert not is_retryable(HttpStatus(status, "x"))


def test_router_proxy_error_is_retried_like_a_503() -> None:
    raw = (RECORDINGS / "loading_proxy_error.http").read_bytes()
    body = raw.split(b"\r\n\r\n", 1)[1].split(b"\r\n")[1].decode()  # the one chunk's data
    assert body.startswith("proxy error:")
    assert is_retryable(HttpStatus(500, body))
    assert not is_retryable(HttpStatus(500, "Internal Server Error"))


@pytest.mark.parametrize(
    "err",
    [
        HttpStatus(400, "too long"),
        WaitTimeout("w"),
        ThinkingOverrun("t"),
        BadResponse("b"),
        Busy("q"),
    ],
)
def test_not_retried_means_no_delay(err: InferError) -> None:
    assert DEFAULT.next_delay(1, 0, err, random.Random(1)) is None


def test_schedule_bounds_of_the_jitter() -> None:
    for attempt, base in [(1, 2000), (2, 8000), (3, 30_000)]:
        assert DEFAULT.schedule(attempt, Extreme(high=False)) == base * 3 // 4
        assert DEFAULT.schedule(attempt, Extreme(high=True)) == base * 5 // 4
        rng = random.Random(attempt)
        seen = [DEFAULT.schedule(attempt, rng) for _ in range(500)]
        assert all(base * 0.75 <= d <= base * 1.25 for d in seen)
        assert max(seen) - min(seen) > base * 0.4  # it does spread over the range


def test_no_jitter_is_exact() -> None:
    policy = RetryPolicy(4, (100, 200, 300), 0.0, 10_000)
    assert [policy.schedule(n, random.Random()) for n in (1, 2, 3)] == [100, 200, 300]


def test_schedule_past_the_list_reuses_the_last_and_refuses_zero() -> None:
    policy = RetryPolicy(9, (100, 200), 0.0, 10_000)
    assert policy.schedule(5, random.Random()) == 200
    with pytest.raises(ValueError, match="start at 1"):
        policy.schedule(0, random.Random())


def test_four_attempts_in_all() -> None:
    err = ConnectFailed("gone")
    rng = Extreme(high=False)
    assert [DEFAULT.next_delay(n, 0, err, rng) for n in (1, 2, 3, 4)] == [1500, 6000, 22_500, None]


def test_a_retry_whose_wait_would_end_past_the_total_is_not_made() -> None:
    err = StreamClosedEarly("cut")
    rng = Extreme(high=True)  # 2500 ms before retry 1
    assert DEFAULT.next_delay(1, 300_000 - 2500, err, rng) == 2500  # ends exactly at the cap
    assert DEFAULT.next_delay(1, 300_000 - 2499, err, rng) is None
    assert DEFAULT.next_delay(2, 290_000, err, rng) == 10_000  # ends at 300 s exactly
    assert DEFAULT.next_delay(2, 290_001, err, rng) is None  # would end at 300.001 s
