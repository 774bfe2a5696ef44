"""What goes into the inference client and what comes out of it (M2a brief, section 3). [core]

`ChatEvent`s are what a caller sees while a request runs. Those the channel forwards unchanged
are proto's turn-event classes (one definition, so `loopd` relays them as they are); only
`ToolCallDelta` is the client's own. Nothing is final before the `Completion`.

The errors a request can end in are in `llama.errors`.
"""

import enum
from collections.abc import Callable
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

OnEvent = Callable[[ChatEvent], None]  # how the client hands each ChatEvent to its caller


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
