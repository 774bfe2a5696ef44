"""What `chat_with_retry` retries, and when (M2a brief, section 4, "Retry"). [core]

Retried: the server could not be reached, went away, went silent, or was still loading -
`ConnectFailed`, `StreamClosedEarly`, `Stalled`, `LoadTimeout` and HTTP 503 (and a router's
500 "proxy error", its way of saying the same while a child server starts). Retrying is safe
because nothing is recorded until a completion is final, so a retry sends the same bytes again.
Everything else is returned at once: `WaitTimeout` has already waited its limit, HTTP 400 includes
"the prompt does not fit" (M2b answers it with compaction), and the rest (`BadResponse`,
`ThinkingOverrun`, `Busy`, other statuses) would fail the same way again.

The schedule: `retry_attempts` attempts in all (4), waiting `retry_delays_ms` (2 s, 8 s, 30 s)
before the retries, each scaled by a random factor in [1 - jitter, 1 + jitter] (±25%) so that
clients restarted together do not retry together. A retry whose wait would end past
`retry_total_ms` (5 minutes) after the first attempt began is not made; the last error is
returned. Time and randomness are parameters, so this is tested without waiting.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from boxmaker.loopd.config import InferenceConfig
from boxmaker.loopd.llama.errors import (
    ConnectFailed,
    HttpStatus,
    InferError,
    LoadTimeout,
    Stalled,
    StreamClosedEarly,
)

# The retryable errors, each with why a second try can succeed.
RETRYABLE: Final[dict[type[InferError], str]] = {
    ConnectFailed: "inferproxy or the server is restarting",
    StreamClosedEarly: "the server went away mid-stream",
    Stalled: "the server went silent; a new connection may find it well",
    LoadTimeout: "the model may have finished loading meanwhile",
}
# HTTP statuses that are retried: 503 is "Loading model" or a server not ready yet.
RETRYABLE_STATUSES: Final = frozenset({503})
# A llama-server router answers 500 with this plain-text body while the child server it forwards
# to is still starting (recordings/loading_proxy_error.http): the same case as a 503.
ROUTER_PROXY_ERROR: Final = "proxy error:"


class Rng(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


def is_retryable(err: InferError) -> bool:
    if isinstance(err, HttpStatus):
        if err.status == 500 and err.body.startswith(ROUTER_PROXY_ERROR):
            return True
        return err.status in RETRYABLE_STATUSES
    # isinstance: Refused is a ConnectFailed (inferproxy dropped it unread).
    return isinstance(err, tuple(RETRYABLE))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int  # in all, the first included
    delays_ms: tuple[int, ...]  # the wait before retry 1, 2, ...
    jitter: float  # each wait is scaled by a factor in [1 - jitter, 1 + jitter]
    total_ms: int  # no retry whose wait ends past this, counted from the first attempt

    @classmethod
    def from_config(cls, config: InferenceConfig) -> "RetryPolicy":
        return cls(
            config.retry_attempts,
            tuple(config.retry_delays_ms),
            config.retry_jitter,
            config.retry_total_ms,
        )

    def schedule(self, attempt: int, rng: Rng) -> int:
        """The wait in ms before retry number `attempt` (1 is the first retry).

        The config guarantees one delay per retry; past the end the last one is reused.
        """
        if attempt < 1:
            raise ValueError(f"retry numbers start at 1, got {attempt}")
        base = _at(self.delays_ms, attempt - 1)
        return max(0, round(base * (1 + rng.uniform(-self.jitter, self.jitter))))

    def next_delay(self, failed: int, elapsed_ms: float, err: InferError, rng: Rng) -> int | None:
        """After attempt number `failed` (from 1) failed with `err`: the wait before the next
        attempt, or None when the error is returned instead.

        Args:
            failed: how many attempts have been made.
            elapsed_ms: the time since the first attempt began.
            err: the error of the last attempt.
            rng: the source of the jitter.
        """
        if not is_retryable(err) or failed >= self.attempts:
            return None
        delay = self.schedule(failed, rng)
        if elapsed_ms + delay > self.total_ms:
            return None
        return delay


def _at(delays: Sequence[int], i: int) -> int:
    return delays[min(i, len(delays) - 1)] if delays else 0
