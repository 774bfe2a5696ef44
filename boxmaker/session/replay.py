"""Replay: a session's log back into the messages of its next request. [core]

`messages` is a pure function of the baseline and the records: `user` gives a user message,
`assistant` an assistant message with its three fields exactly as the server returned them,
`tool_result` a tool message; every other record (`session_start`, `usage`, `cache_loss`,
`epoch_end`) gives nothing. A record's message never depends on a later record, so the messages
of a log's prefix are a prefix of the messages of the whole log: each request of a session
extends the one before byte for byte, and the server's prompt cache keeps hitting.

The request for a turn is `request_messages` (the baseline's system message, then `messages`)
with `baseline.tools`. Per-turn options such as `thinking` go in the request's generation
switches (`ChatRequest.thinking`), never into a message.
"""

from __future__ import annotations

from collections.abc import Iterable

from boxmaker.proto import (
    Assistant,
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
    ToolResult,
    User,
    UserMessage,
)
from boxmaker.proto.log import LogRecord
from boxmaker.proto.make import maker

from .baseline import Baseline


def message(record: LogRecord) -> ChatMessage | None:
    """The message one record gives, or None."""
    if isinstance(record, User):
        return UserMessage(record.content)
    if isinstance(record, Assistant):
        return AssistantMessage(record.content, record.reasoning_content, record.tool_calls)
    if isinstance(record, ToolResult):
        return ToolMessage(record.tool_call_id, record.content)
    return None


def messages(baseline: Baseline, records: Iterable[LogRecord]) -> list[ChatMessage]:
    """The conversation the records hold, without the system message: `message` of each record,
    written out for the types that give one (a resume replays every record of the log).

    `baseline` is the session's; the messages do not depend on it today, and the parameter keeps
    the brief's signature for when an epoch's baseline carries a summary (M5).
    """
    out: list[ChatMessage] = []
    append = out.append
    for record in records:
        if isinstance(record, User):
            append(_user_message(record.content))
        elif isinstance(record, Assistant):
            append(
                _assistant_message(
                    record.content,
                    record.reasoning_content,
                    record.tool_calls,
                )
            )
        elif isinstance(record, ToolResult):
            append(_tool_message(record.tool_call_id, record.content))
    return out


_user_message = maker(UserMessage)
_assistant_message = maker(AssistantMessage)
_tool_message = maker(ToolMessage)


def request_messages(baseline: Baseline, records: Iterable[LogRecord]) -> list[ChatMessage]:
    """The messages of the next request: the baseline's system message, then `messages`."""
    return [SystemMessage(baseline.system), *messages(baseline, records)]
