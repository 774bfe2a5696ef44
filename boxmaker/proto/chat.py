"""Chat messages, the four kinds the chat template knows, and the timings a completion reports.

`ChatMessage` is a tagged union of frozen dataclasses (DECISIONS.md: an enum with data). The tag
is the class attribute `TAG`, which is the message's `role`. Their JSON form is the one a
chat-completions request carries:

    {"role": "system", "content": "..."}
    {"role": "user", "content": "..."}
    {"role": "assistant", "content": "..." | null,
     "reasoning_content": "..."          (only when not null),
     "tool_calls": [<ToolCall.to_openai()>, ...]   (only when not empty)}
    {"role": "tool", "tool_call_id": "...", "content": "..."}

`AssistantMessage` holds the same three fields as the log's `Assistant` record, so a log replays
into messages without conversion.
"""

from dataclasses import dataclass, field
from typing import ClassVar, Self

from ._codec import (
    OPT_STR,
    STR,
    UINT,
    JsonObj,
    check_keys,
    from_obj,
    json_type,
    quote,
    to_obj,
    wire,
    wrong,
)
from .errors import BodyError, EncodeError
from .tool import ToolCall


@dataclass(frozen=True, slots=True)
class SystemMessage:
    TAG: ClassVar[str] = "system"
    content: str = field(metadata=wire(STR))

    def to_json(self) -> JsonObj:
        return to_obj(self, "message", into={"role": self.TAG})


@dataclass(frozen=True, slots=True)
class UserMessage:
    TAG: ClassVar[str] = "user"
    content: str = field(metadata=wire(STR))

    def to_json(self) -> JsonObj:
        return to_obj(self, "message", into={"role": self.TAG})


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """A completion as a message: the three fields exactly as the server returned them."""

    TAG: ClassVar[str] = "assistant"
    content: str | None
    reasoning_content: str | None
    tool_calls: tuple[ToolCall, ...] = ()

    def to_json(self) -> JsonObj:
        out: JsonObj = {
            "role": self.TAG,
            "content": OPT_STR.encode(self.content, "message.content"),
        }
        if self.reasoning_content is not None:
            out["reasoning_content"] = STR.encode(
                self.reasoning_content, "message.reasoning_content"
            )
        if not isinstance(self.tool_calls, tuple):
            raise EncodeError(
                f"message.tool_calls: expected tuple, got {type(self.tool_calls).__name__}"
            )
        if self.tool_calls:
            out["tool_calls"] = [
                _checked_call(c, f"message.tool_calls[{i}]").to_openai()
                for i, c in enumerate(self.tool_calls)
            ]
        return out

    @classmethod
    def _from_json(cls, obj: JsonObj, path: str) -> Self:
        optional = [k for k in ("reasoning_content", "tool_calls") if k in obj]
        check_keys(obj, ("role", "content", *optional), path)
        reasoning = None
        if "reasoning_content" in obj:
            reasoning = STR.decode(obj["reasoning_content"], f"{path}.reasoning_content")
        calls: tuple[ToolCall, ...] = ()
        if "tool_calls" in obj:
            raw = obj["tool_calls"]
            if not isinstance(raw, list):
                raise wrong(f"{path}.tool_calls", "array", raw)
            if not raw:
                # to_json leaves the key out instead, so there is one form for "no calls".
                raise BodyError(f"{path}.tool_calls: expected a non-empty array, got []")
            calls = tuple(
                ToolCall.from_openai(c, f"{path}.tool_calls[{i}]") for i, c in enumerate(raw)
            )
        return cls(OPT_STR.decode(obj["content"], f"{path}.content"), reasoning, calls)


def _checked_call(call: object, path: str) -> ToolCall:
    if not isinstance(call, ToolCall):
        raise EncodeError(f"{path}: expected ToolCall, got {type(call).__name__}")
    return call


@dataclass(frozen=True, slots=True)
class ToolMessage:
    TAG: ClassVar[str] = "tool"
    tool_call_id: str = field(metadata=wire(STR))
    content: str = field(metadata=wire(STR))

    def to_json(self) -> JsonObj:
        return to_obj(self, "message", into={"role": self.TAG})


ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage

_ROLES: dict[str, type[SystemMessage | UserMessage | ToolMessage]] = {
    c.TAG: c for c in (SystemMessage, UserMessage, ToolMessage)
}


def chat_message_from_json(obj: object, path: str = "message") -> ChatMessage:
    """Decodes one message in the form `to_json` writes, strictly.

    Raises:
        BodyError: naming the field and the expected type.
    """
    if not isinstance(obj, dict):
        raise wrong(path, "object", obj)
    if "role" not in obj:
        raise BodyError(f'{path}: missing key "role"')
    role = obj["role"]
    if role == AssistantMessage.TAG:
        return AssistantMessage._from_json(obj, path)
    if not isinstance(role, str) or role not in _ROLES:
        roles = ", ".join(quote(r) for r in (*_ROLES, AssistantMessage.TAG))
        shown = quote(role) if isinstance(role, str) else json_type(role)
        raise BodyError(f"{path}.role: expected one of {roles}, got {shown}")
    return from_obj(_ROLES[role], obj, path, extra_keys=("role",))


@dataclass(frozen=True, slots=True)
class Timings:
    """The token counts of one completion, from the server's last per-chunk `timings`."""

    cache_n: int = field(metadata=wire(UINT))
    prompt_n: int = field(metadata=wire(UINT))
    predicted_n: int = field(metadata=wire(UINT))

    @property
    def total(self) -> int:
        """Tokens in the slot's cache after this completion: what the next request can reuse."""
        return self.cache_n + self.prompt_n + self.predicted_n

    def to_json(self) -> JsonObj:
        return to_obj(self, "timings")

    @classmethod
    def from_json(cls, obj: object, path: str = "timings") -> Self:
        return from_obj(cls, obj, path)
