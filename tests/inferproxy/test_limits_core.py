"""The admission core on a settable clock: instant, no sockets (STYLE.md R2)."""

import pytest

from boxmaker.inferproxy.limits import (
    DEFAULT_ACCEPT_BURST,
    DEFAULT_ACCEPT_RATE,
    DEFAULT_MAX_CONNECTIONS,
    AcceptLimits,
    ConnectionCounter,
    Refusal,
    TokenBucket,
)


def test_defaults_are_the_briefs() -> None:
    assert (DEFAULT_MAX_CONNECTIONS, DEFAULT_ACCEPT_BURST, DEFAULT_ACCEPT_RATE) == (8, 10, 2.0)


def test_bucket_allows_a_burst_then_refuses() -> None:
    bucket = TokenBucket(10, 2.0)
    assert [bucket.allow(100.0) for _ in range(12)] == [True] * 10 + [False] * 2


def test_bucket_refills_at_its_rate() -> None:
    bucket = TokenBucket(10, 2.0)
    for _ in range(10):
        assert bucket.allow(0.0)
    assert not bucket.allow(0.49)  # 0.98 of a token
    assert bucket.allow(0.5)  # the first whole token
    assert not bucket.allow(0.5)
    assert not bucket.allow(0.99)
    assert bucket.allow(1.0)
    # Two seconds later: four tokens, no more.
    assert [bucket.allow(3.0) for _ in range(5)] == [True] * 4 + [False]


def test_bucket_admits_the_rate_over_a_long_run() -> None:
    bucket = TokenBucket(10, 2.0)
    # One attempt every 10 ms for 60 s: the burst plus 2 a second.
    admitted = sum(bucket.allow(i / 100) for i in range(6000))
    assert admitted == 10 + 2 * 59 + 1  # tokens at t = 0.5, 1.0, ..., 59.5 and the burst


def test_bucket_never_holds_more_than_its_burst() -> None:
    bucket = TokenBucket(3, 20.0)
    assert bucket.allow(0.0)
    assert bucket.tokens(1000.0) == 3
    assert [bucket.allow(1000.0) for _ in range(4)] == [True, True, True, False]


def test_refused_attempts_take_no_token() -> None:
    bucket = TokenBucket(1, 1.0)
    assert bucket.allow(0.0)
    for t in (0.1, 0.2, 0.3, 0.9):
        assert not bucket.allow(t)
    assert bucket.allow(1.0)


def test_clock_stepping_back_refills_nothing() -> None:
    bucket = TokenBucket(2, 1.0)
    assert bucket.allow(10.0)
    assert bucket.allow(10.0)
    assert not bucket.allow(5.0)  # back in time: no refill
    assert not bucket.allow(5.9)  # 0.9 s after the step back, still short of a token
    assert bucket.allow(6.0)


@pytest.mark.parametrize(("burst", "rate"), [(0, 1.0), (1, 0.0), (1, -1.0), (1, float("inf"))])
def test_bucket_rejects_meaningless_settings(burst: int, rate: float) -> None:
    with pytest.raises(ValueError, match="token bucket"):
        TokenBucket(burst, rate)


def test_counter_caps_and_releases() -> None:
    counter = ConnectionCounter(8)
    assert [counter.try_open() for _ in range(9)] == [True] * 8 + [False]
    counter.close()
    assert counter.open == 7
    assert counter.try_open()
    assert not counter.try_open()


def test_counter_refuses_to_go_negative() -> None:
    counter = ConnectionCounter(1)
    with pytest.raises(RuntimeError, match="closed more connections than it opened"):
        counter.close()


def test_admit_names_the_limit_that_refused() -> None:
    limits = AcceptLimits(max_connections=8, burst=10, refill_per_s=2.0)
    outcomes = [limits.admit(0.0) for _ in range(11)]
    assert outcomes == [None] * 8 + [Refusal.CONNECTIONS, Refusal.CONNECTIONS, Refusal.RATE]
    assert limits.open == 8
    limits.release()
    # The bucket is empty, so a free slot alone does not admit: the rate limit answers first.
    assert limits.admit(0.1) is Refusal.RATE
    assert limits.admit(0.5) is None
    assert limits.open == 8


def test_refusals_by_the_connection_cap_still_drain_the_bucket() -> None:
    # A client retrying at once against a full proxy is slowed by the bucket too.
    limits = AcceptLimits(max_connections=1, burst=3, refill_per_s=1.0)
    assert [limits.admit(0.0) for _ in range(4)] == [
        None,
        Refusal.CONNECTIONS,
        Refusal.CONNECTIONS,
        Refusal.RATE,
    ]


def test_descriptions_name_the_setting() -> None:
    limits = AcceptLimits(max_connections=8, burst=10, refill_per_s=2.0)
    assert limits.describe(Refusal.CONNECTIONS) == "connection limit (8 open)"
    assert limits.describe(Refusal.RATE) == "accept rate limit (burst 10, refill 2/s)"
