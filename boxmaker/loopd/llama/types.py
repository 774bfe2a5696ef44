"""What goes into the inference client and what comes out of it (M2a brief, section 3). [core]

`ChatEvent`s are what a caller sees while a request runs. Those the channel forwards unchanged
are proto's turn-event classes (one definition, so `loopd` relays them as they are); only
`ToolCallDelta` is the client's own. Nothing is final before the `Completion`.

`InferError` is an exception family, one class per variant of the brief's enum; each has a
`TAG` (the brief's name in snake_case) so it can be printed as one JSON line and so
`llama.retry` can say which are retryable in a table.
"""

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from boxmaker.proto import (
    ChatMessage,
    ContentEvent,
    ProgressEvent,
    QueuedEvent,
    ReasoningEvent,
    RetryingEvent,
    ThinkingCappedEvent,
    Timings,
    ToolCall,
    ToolSchema,
    WaitingEvent,
)
from boxmaker.proto import event_to_json as proto_event_to_json


@dataclass(frozen=True, slots=True)
class ChatRequest:
    slot: int
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSchema, ...] = ()  # fixed for the epoch; may be empty
    thinking: bool = True


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call; pieces with the same `index` belong to one call."""

    TAG: ClassVar[str] = "tool_call_delta"
    index: int
    id: str | None
    name: str | None
    arguments: str


ChatEvent = (
    QueuedEvent
    | WaitingEvent
    | ProgressEvent
    | ReasoningEvent
    | ContentEvent
    | ToolCallDelta
    | ThinkingCappedEvent
    | RetryingEvent
)


class FinishReason(enum.StrEnum):
    STOP = "stop"
    TOOL_CALLS = "tool_calls"
    LENGTH = "length"


@dataclass(frozen=True, slots=True)
class Completion:
    id: str
    content: str | None
    reasoning_content: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    timings: Timings  # the latest per-chunk timings: cache_n, prompt_n, predicted_n
    reasoning_tokens: int
    thinking_capped: bool


class InferError(Exception):
    """A request that ended without a completion. `str(err)` says what happened."""

    TAG: ClassVar[str] = "infer_error"

    def to_json(self) -> dict[str, Any]:
        return {"error": self.TAG, "message": str(self)}


class Busy(InferError):
    """loopd's own queue for the slot is full."""

    TAG = "busy"


class ConnectFailed(InferError):
    """infer.sock could not be reached, or the connection broke before a response began."""

    TAG = "connect"


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


INFER_ERRORS: tuple[type[InferError], ...] = (
    Busy,
    ConnectFailed,
    WaitTimeout,
    LoadTimeout,
    Stalled,
    StreamClosedEarly,
    ThinkingOverrun,
    HttpStatus,
    BadResponse,
)

HTTP_BODY_CAP_BYTES = 4096  # an error body kept in HttpStatus, so a huge page can't flood a log


def event_to_json(event: ChatEvent) -> dict[str, Any]:
    """One ChatEvent as a JSON object tagged by `type` (for `loopd complete`)."""
    if isinstance(event, ToolCallDelta):
        return {
            "type": event.TAG,
            "index": event.index,
            "id": event.id,
            "name": event.name,
            "arguments": event.arguments,
        }
    return proto_event_to_json(event)


def completion_to_json(c: Completion) -> dict[str, Any]:
    return {
        "type": "completion",
        "id": c.id,
        "content": c.content,
        "reasoning_content": c.reasoning_content,
        "tool_calls": [t.to_json() for t in c.tool_calls],
        "finish_reason": str(c.finish_reason),
        "timings": c.timings.to_json(),
        "reasoning_tokens": c.reasoning_tokens,
        "thinking_capped": c.thinking_capped,
    }
