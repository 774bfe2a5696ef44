"""Streamed chat-completion chunks folded into events and one Completion. [core]

Each `data:` payload of llama-server's stream is one JSON chunk (its README and recordings/):

    {"id": "chatcmpl-...", "choices": [{"index": 0, "finish_reason": null | "stop" | ...,
      "delta": {"role"?, "content"?, "reasoning_content"?, "tool_calls"?: [
         {"index": 0, "id"?, "type"?, "function": {"name"?, "arguments"?}}]}}],
     "timings"?: {"cache_n", "prompt_n", "predicted_n", ...},
     "prompt_progress"?: {"total", "cache", "processed", "time_ms"}}

or `{"error": {"code", "message", "type"}}` when the server fails mid-stream. The rules:

- Content and reasoning deltas are concatenated in order; a field that is null or absent adds
  nothing, and a completion field no delta ever set stays None.
- Tool-call deltas group by `index`: `id` and `name` come from the first delta that has them,
  `arguments` pieces are concatenated. Calls come out in index order.
- `timings` are kept from the latest chunk that has them; `prompt_progress` is a ProgressEvent.
- Reasoning tokens are counted from the per-chunk `predicted_n` (M2a brief, section 4): the
  tokens a chunk adds (its predicted_n minus the last one seen) count as reasoning when the chunk
  carries a reasoning delta. A reasoning chunk without timings counts as one token.
- The first non-null `finish_reason` ends the completion; an unknown one is a BadResponse. A
  stream that ends without one is StreamClosedEarly.
- Unknown keys are ignored (the server adds fields over time); a known key of the wrong type is
  a BadResponse that names it.
"""

from dataclasses import dataclass, field
from typing import Any

from boxmaker.loopd.llama.errors import (
    HTTP_BODY_CAP_BYTES,
    BadResponse,
    HttpStatus,
    StreamClosedEarly,
)
from boxmaker.loopd.llama.types import ChatEvent, Completion, FinishReason, ToolCallDelta
from boxmaker.proto import (
    ContentEvent,
    ProgressEvent,
    ReasoningEvent,
    Timings,
    ToolCall,
    load_json_object,
)

_FINISH = {r.value: r for r in FinishReason}


@dataclass(slots=True)
class _Call:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


def _get(obj: dict[str, Any], key: str, kind: type, path: str) -> Any:
    """obj[key] if it is a `kind` (a bool is not an int); None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise BadResponse(f"stream chunk: {path}.{key} has the wrong type: {value!r:.80}")
    return value


def _count(obj: dict[str, Any], key: str, path: str) -> int:
    value = _get(obj, key, int, path)
    if value is None or value < 0:
        raise BadResponse(f"stream chunk: {path}.{key} must be a non-negative integer")
    return int(value)


class Assembler:
    """Folds the payloads of one stream. Feed each payload; then `completion()`."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.finish_reason: FinishReason | None = None
        self.timings: Timings | None = None
        self.reasoning_tokens = 0
        self._predicted = 0  # predicted_n of the latest chunk with timings
        self._content: list[str] | None = None
        self._reasoning: list[str] | None = None
        self._calls: dict[int, _Call] = {}

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def feed(self, payload: bytes) -> list[ChatEvent]:
        """Folds one `data:` payload; returns the events it makes, in order.

        Raises:
            BadResponse: not JSON, a wrong type, an unknown finish_reason.
            HttpStatus: the stream carried an error object with an HTTP status code.
        """
        chunk = load_json_object(
            payload, "a stream chunk", lambda m: BadResponse(f"{m}: {payload[:80]!r}")
        )
        if "error" in chunk:
            raise _stream_error(chunk["error"], payload)
        events: list[ChatEvent] = []
        if (cid := _get(chunk, "id", str, "chunk")) is not None and self.id is None:
            self.id = cid
        if (progress := _get(chunk, "prompt_progress", dict, "chunk")) is not None:
            p = "chunk.prompt_progress"
            events.append(
                ProgressEvent(
                    _count(progress, "total", p),
                    _count(progress, "cache", p),
                    _count(progress, "processed", p),
                )
            )
        added = None  # tokens this chunk adds, when it carries timings
        if (timings := _get(chunk, "timings", dict, "chunk")) is not None:
            t = "chunk.timings"
            self.timings = Timings(
                _count(timings, "cache_n", t),
                _count(timings, "prompt_n", t),
                _count(timings, "predicted_n", t),
            )
            added = max(0, self.timings.predicted_n - self._predicted)
            self._predicted = self.timings.predicted_n
        choices = _get(chunk, "choices", list, "chunk") or []
        if len(choices) > 1:
            raise BadResponse(f"stream chunk: expected one choice, got {len(choices)}")
        if choices:
            events += self._choice(choices[0], added)
        return events

    def _choice(self, choice: object, added: int | None) -> list[ChatEvent]:
        if not isinstance(choice, dict):
            raise BadResponse(f"stream chunk: choices[0] is not an object: {choice!r:.80}")
        events: list[ChatEvent] = []
        delta = _get(choice, "delta", dict, "choices[0]") or {}
        d = "choices[0].delta"
        if (text := _get(delta, "reasoning_content", str, d)) is not None:
            self.reasoning_tokens += 1 if added is None else added
            self._reasoning = self._reasoning if self._reasoning is not None else []
            self._reasoning.append(text)
            events += [ReasoningEvent(text)] if text else []
        if (text := _get(delta, "content", str, d)) is not None:
            self._content = self._content if self._content is not None else []
            self._content.append(text)
            events += [ContentEvent(text)] if text else []
        for i, raw in enumerate(_get(delta, "tool_calls", list, d) or []):
            events.append(self._tool_delta(raw, f"{d}.tool_calls[{i}]"))
        reason = _get(choice, "finish_reason", str, "choices[0]")
        if reason is not None and self.finish_reason is None:
            if reason not in _FINISH:
                raise BadResponse(f"stream chunk: unknown finish_reason {reason!r}")
            self.finish_reason = _FINISH[reason]
        return events

    def _tool_delta(self, raw: object, path: str) -> ToolCallDelta:
        if not isinstance(raw, dict):
            raise BadResponse(f"stream chunk: {path} is not an object")
        index = _get(raw, "index", int, path)
        if index is None or index < 0:
            raise BadResponse(f"stream chunk: {path}.index must be a non-negative integer")
        fn = _get(raw, "function", dict, path) or {}
        call_id = _get(raw, "id", str, path)
        name = _get(fn, "name", str, f"{path}.function")
        arguments = _get(fn, "arguments", str, f"{path}.function") or ""
        call = self._calls.setdefault(index, _Call())
        call.id = call.id if call.id is not None else call_id
        call.name = call.name if call.name is not None else name
        call.arguments.append(arguments)
        return ToolCallDelta(index, call_id, name, arguments)

    def completion(self, thinking_capped: bool = False) -> Completion:
        """The completion, once a finish_reason has been seen.

        Raises:
            StreamClosedEarly: no finish_reason came.
            BadResponse: no completion id or timings, or a tool call without an id or name.
        """
        if self.finish_reason is None:
            raise StreamClosedEarly("the stream ended without a finish_reason")
        if self.id is None:
            raise BadResponse("the stream carried no completion id")
        if self.timings is None:
            raise BadResponse("the stream carried no timings (timings_per_token was asked for)")
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if call.id is None or call.name is None:
                missing = "id" if call.id is None else "name"
                raise BadResponse(f"tool call {index} came without its {missing}")
            calls.append(ToolCall(call.id, call.name, "".join(call.arguments)))
        return Completion(
            id=self.id,
            content=None if self._content is None else "".join(self._content),
            reasoning_content=None if self._reasoning is None else "".join(self._reasoning),
            tool_calls=tuple(calls),
            finish_reason=self.finish_reason,
            timings=self.timings,
            reasoning_tokens=self.reasoning_tokens,
            thinking_capped=thinking_capped,
        )


def _stream_error(error: object, payload: bytes) -> HttpStatus | BadResponse:
    """An `{"error": {...}}` chunk: HttpStatus when it names an HTTP status, else BadResponse."""
    body = payload[:HTTP_BODY_CAP_BYTES].decode("utf-8", "replace")
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return HttpStatus(code, body)
    message = error.get("message") if isinstance(error, dict) else error
    return BadResponse(f"the stream carried an error: {message!r:.200}")
