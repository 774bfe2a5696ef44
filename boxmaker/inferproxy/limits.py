"""The admission rules of `inferproxy`: a token bucket on accept and a connection cap. [core]

A sans-IO core (STYLE.md R2): time is a parameter (`now`, seconds on any monotonic clock), so the
tests drive it with a settable clock and no sleeps. The shell (`proxy.py`) owns the sockets, the
clock and the lock that makes `admit`/`release` safe across its threads.

The limits stop accidents, not attacks (m2a spec, section 7): a retry storm after a server restart,
several sessions talking at once, a loop that spins.
"""

import enum
import math

# The brief's numbers (m2a spec, section 2).
DEFAULT_MAX_CONNECTIONS = 8  # one llama-server has few slots; more clients only queue there
DEFAULT_ACCEPT_BURST = 10  # a session start or a reconnect burst gets through at once
DEFAULT_ACCEPT_RATE = 2.0  # then 2 new connections a second: a spinning loop is slowed, not served


class TokenBucket:
    """`burst` tokens to start with, refilled at `refill_per_s`; each allowed event takes one."""

    def __init__(self, burst: int, refill_per_s: float) -> None:
        if burst < 1:
            raise ValueError(f"token bucket burst must be at least 1, got {burst}")
        if not (refill_per_s > 0 and math.isfinite(refill_per_s)):
            raise ValueError(f"token bucket refill must be a positive rate, got {refill_per_s}")
        self.burst = burst
        self.refill_per_s = refill_per_s
        self._tokens = float(burst)
        self._last: float | None = None

    def allow(self, now: float) -> bool:
        """Takes a token if one is there at time `now`; True when the event may go ahead."""
        if self._last is not None and now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.refill_per_s)
        # A clock that steps back refills nothing but still moves the mark, so that the
        # time before the step is never counted twice.
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    # Kept though only tests call it: the one view of the level that takes no token, which the
    # core's tests need to see the burst cap (tests/inferproxy/test_limits_core.py).
    def tokens(self, now: float) -> float:
        """The tokens there would be at `now`, without taking one."""
        if self._last is None or now <= self._last:
            return self._tokens
        return min(self.burst, self._tokens + (now - self._last) * self.refill_per_s)


class ConnectionCounter:
    """How many connections are open, against a cap."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"connection limit must be at least 1, got {limit}")
        self.limit = limit
        self.open = 0

    def try_open(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def close(self) -> None:
        if self.open <= 0:
            raise RuntimeError("connection counter closed more connections than it opened")
        self.open -= 1


class Refusal(enum.Enum):
    """Why a connection was closed at once; the value is the limit's name in the log line."""

    RATE = "accept rate"
    CONNECTIONS = "connections"


class AcceptLimits:
    """Both rules together: `admit(now)` for each accepted connection, `release()` when it ends.

    Every accept takes a token, refused or not, so a client that retries at once when it is over
    the connection cap drains the bucket instead of spinning the accept loop for free.
    """

    def __init__(
        self,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        burst: int = DEFAULT_ACCEPT_BURST,
        refill_per_s: float = DEFAULT_ACCEPT_RATE,
    ) -> None:
        self.bucket = TokenBucket(burst, refill_per_s)
        self.counter = ConnectionCounter(max_connections)

    @property
    def open(self) -> int:
        return self.counter.open

    def admit(self, now: float) -> Refusal | None:
        """None when the connection may go ahead (it then counts as open), else why not."""
        if not self.bucket.allow(now):
            return Refusal.RATE
        if not self.counter.try_open():
            return Refusal.CONNECTIONS
        return None

    def release(self) -> None:
        """One admitted connection has ended."""
        self.counter.close()

    def describe(self, refusal: Refusal) -> str:
        """The refusal line's reason, naming the limit and its setting."""
        if refusal is Refusal.RATE:
            return (
                f"accept rate limit (burst {self.bucket.burst}, "
                f"refill {self.bucket.refill_per_s:g}/s)"
            )
        return f"connection limit ({self.counter.limit} open)"
