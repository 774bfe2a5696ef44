"""The chat-completions request body, from a ChatRequest and the config. [core]

The body is a faithful render of its inputs (M2a brief, section 1) and deterministic: the same
inputs give the same bytes, key order included, because M2b checks that each request of a session
extends the one before byte for byte, and a retry sends the same bytes again. Keys, in order:

    model, messages, tools (only when there are tools), id_slot, cache_prompt, stream,
    return_progress, timings_per_token, reasoning_control, max_tokens,
    the [inference.sampling] settings that are set (in their declaration order),
    chat_template_kwargs {"enable_thinking": <thinking>},
    then the `extra` keys (in their order; one that names a key above replaces its value there).

`thinking` is passed to the chat template as `chat_template_kwargs.enable_thinking` (llama-server's
README: "Allows sending additional parameters to the json templating system. For example:
{"enable_thinking": false}"). It is sent both ways, true and false, so the request says what it
wants whatever the template's own default is. It is what scripts/record.py sends to the real
server, and the recordings show reasoning_content with true and none with false.

`extra` is for the start-up self-test, which needs `tool_choice`, `parallel_tool_calls`, `stop`
and a `temperature` of its own; its assistant prefill is simply the last message of the request.
It may lower `max_tokens`, never raise it: the client stops a stream that generates more than
[inference] max_tokens (`llama.assemble`).
"""

from collections.abc import Mapping
from typing import Any, Final

import orjson

from boxmaker.loopd.config import InferenceConfig
from boxmaker.loopd.llama.types import ChatRequest

CHAT_PATH: Final = "/v1/chat/completions"

# Keys the client owns: an `extra` mapping may not change what the client relies on.
RESERVED_KEYS: Final = frozenset(
    {
        "model",
        "messages",
        "tools",
        "id_slot",
        "stream",
        "return_progress",
        "timings_per_token",
        "reasoning_control",
        "chat_template_kwargs",
    }
)


def chat_body(
    req: ChatRequest, config: InferenceConfig, extra: Mapping[str, Any] | None = None
) -> bytes:
    """The JSON body of a streamed chat completion.

    Args:
        req: the slot, the messages, the tools and the thinking switch.
        config: the model id, max_tokens and sampling settings.
        extra: more top-level fields, e.g. {"tool_choice": "required", "stop": [...]}.

    Returns:
        Compact UTF-8 JSON (orjson), the same bytes for the same inputs.

    Raises:
        ValueError: `extra` names a key the client owns (see RESERVED_KEYS), or a max_tokens that
            is not an integer from 1 to config.max_tokens.
        boxmaker.proto.EncodeError: a message or tool that cannot be encoded.
    """
    body: dict[str, Any] = {
        "model": config.model,
        "messages": [m.to_json() for m in req.messages],
    }
    if req.tools:
        body["tools"] = [t.to_openai() for t in req.tools]
    body |= {
        "id_slot": req.slot,
        "cache_prompt": True,
        "stream": True,
        "return_progress": True,
        "timings_per_token": True,
        "reasoning_control": True,
        "max_tokens": config.max_tokens,
    }
    body |= config.sampling.params()
    if config.parallel_tool_calls is not None and req.tools:
        body["parallel_tool_calls"] = config.parallel_tool_calls
    body["chat_template_kwargs"] = {"enable_thinking": req.thinking}
    for key, value in (extra or {}).items():
        if key in RESERVED_KEYS:
            raise ValueError(f"extra request field {key!r} is set by the client itself")
        if key == "max_tokens" and not _lower_max_tokens(value, config.max_tokens):
            raise ValueError(
                f"extra max_tokens must be an integer from 1 to [inference] max_tokens = "
                f"{config.max_tokens} (the stream is stopped there), got {value!r:.40}"
            )
        body[key] = value  # an existing key keeps its place: same order, new value
    return orjson.dumps(body)


def _lower_max_tokens(value: object, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit
