"""The inference client's error family (M2a brief, section 3). [core]

`InferError` is an exception family, one class per variant of the brief's enum; each has a
`TAG` (the brief's name in snake_case) so it can be printed as one JSON line and so
`llama.retry` can say which are retryable in a table. It sits at llama's ground floor: the
HTTP and SSE cores and the transport raise it, and import nothing else of llama.
"""

from typing import Any, ClassVar


class InferError(Exception):
    """A request that ended without a completion. `str(err)` says what happened."""

    TAG: ClassVar[str] = "infer_error"

    def to_json(self) -> dict[str, Any]:
        return {"error": self.TAG, "message": str(self)}

    def describe(self) -> str:
        """One line for a person or an event: the TAG, then what happened."""
        return f"{self.TAG}: {self}"


class Busy(InferError):
    """loopd's own queue for the slot is full."""

    TAG = "busy"


class ConnectFailed(InferError):
    """infer.sock could not be reached, or the connection broke before a response began."""

    TAG = "connect"


class Unanswered(ConnectFailed):
    """The connection ended before any byte of an answer."""


class Refused(Unanswered):
    """infer.sock dropped the connection without reading the request (a reset, or a broken pipe
    while sending): how inferproxy refuses one over its accept limits, or ends one whose upstream
    it cannot reach. Nothing was read, so sending it again is always safe."""


class WaitTimeout(InferError):
    """The slot stayed busy past `busy_wait_ms`."""

    TAG = "wait_timeout"


class LoadTimeout(InferError):
    """The server stayed unavailable (loading, restarting) past `load_wait_ms`."""

    TAG = "load_timeout"


class Stalled(InferError):
    """Silence past `idle_grace_ms` on an idle slot, or past `liveness_ms` after the first byte."""

    TAG = "stalled"


class StreamClosedEarly(InferError):
    """The stream ended without a `finish_reason`."""

    TAG = "stream_closed_early"


class ThinkingOverrun(InferError):
    """Reasoning went on past the cap plus the overrun, or `reasoning_end` was refused."""

    TAG = "thinking_overrun"


class HttpStatus(InferError):
    """The server answered with an error status. `body` is capped at 4 KiB."""

    TAG = "http"

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body

    def to_json(self) -> dict[str, Any]:
        return {"error": self.TAG, "status": self.status, "body": self.body, "message": str(self)}


class BadResponse(InferError):
    """The server broke the protocol: a malformed head, body, chunk or line, or a size cap."""

    TAG = "protocol"


HTTP_BODY_CAP_BYTES = 4096  # an error body kept in HttpStatus, so a huge page can't flood a log
