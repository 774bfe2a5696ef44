"""Synthetic requests for the real llama-server, and a fold of its streamed answers.

Shared by scripts/record.py (which records them into recordings/) and the harness tests, so a
recording and a test send the same shapes. `chat_body` carries every field the client in the M2a
brief sends (section 3).
"""

from __future__ import annotations

from typing import Any

from tests.support import rawhttp
from tests.support.llama import MODEL_ID

SEED = 42
SYSTEM = "You are a helpful assistant."
# The tiny model reasons about this for as long as it is allowed to.
LONG_ESSAY = "Write a very long and detailed essay about the history of Rome, century by century."
# The partial assistant message that forces a tool call with the local profile's template.
FORCE_TOOL = {"role": "assistant", "content": "<tool_call>"}
# Two earlier turns that show <think>...</think> then an answer: without them the small model
# never closes its thinking block on its own.
THINKING_SHOTS = [
    {"role": "user", "content": "What is 1+1?"},
    {"role": "assistant", "reasoning_content": "1 plus 1 is 2.\n", "content": "2"},
    {"role": "user", "content": "What is the capital of Italy?"},
    {
        "role": "assistant",
        "reasoning_content": "Italy's capital city is Rome.\n",
        "content": "Rome",
    },
]


def tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style function tool whose properties are all required."""
    parameters = {"type": "object", "properties": properties, "required": list(properties)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


WEATHER_TOOL = tool(
    "get_weather",
    "Get the current weather for a city",
    {"city": {"type": "string", "description": "The city"}},
)
# The one tool the sessions issue exposes: it calls another tool by name.
CALL_TOOL = tool(
    "call_tool",
    'Call one of the available tools by name. Tools: echo (arguments: {"text": string}) repeats'
    " the text back.",
    {
        "name": {"type": "string", "description": 'The tool to call, e.g. "echo"'},
        "arguments": {
            "type": "object",
            "description": 'The tool\'s arguments, e.g. {"text": "hi"} for echo',
        },
    },
)


def chat_body(
    messages: list[dict[str, Any]],
    *,
    max_tokens: int,
    thinking: bool,
    tools: list[dict[str, Any]] | None = None,
    slot: int = 0,
) -> dict[str, Any]:
    """A streamed chat request with every field the client sends; tools are forced if given."""
    body: dict[str, Any] = {"model": MODEL_ID, "messages": messages}
    if tools:
        body |= {"tools": tools, "tool_choice": "required", "parallel_tool_calls": False}
    return body | {
        "id_slot": slot,
        "cache_prompt": True,
        "stream": True,
        "return_progress": True,
        "timings_per_token": True,
        "reasoning_control": True,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": SEED,
        "chat_template_kwargs": {"enable_thinking": thinking},
    }


def fold(res: rawhttp.Response) -> dict[str, Any]:
    """What a streamed answer carried, folded: the reasoning and content text, the tool calls by
    index, the finish reason, the completion ids, and how many chunks had each kind of delta."""
    out: dict[str, Any] = {
        "reasoning": "", "content": "", "calls": {}, "finish": None, "ids": set(),
        "n_reasoning": 0, "n_content": 0, "n_progress": 0,
    }  # fmt: skip
    for chunk in rawhttp.sse_json(res.content()):
        out["ids"].add(chunk["id"])
        out["n_progress"] += "prompt_progress" in chunk
        for choice in chunk["choices"]:
            delta = choice["delta"]
            out["reasoning"] += delta.get("reasoning_content") or ""
            out["content"] += delta.get("content") or ""
            out["n_reasoning"] += bool(delta.get("reasoning_content"))
            out["n_content"] += bool(delta.get("content"))
            for call in delta.get("tool_calls", []):
                slot = out["calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                slot["name"] += call["function"].get("name") or ""
                slot["arguments"] += call["function"].get("arguments") or ""
            out["finish"] = choice["finish_reason"] or out["finish"]
    return out
