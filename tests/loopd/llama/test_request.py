"""boxmaker.loopd.llama.request: the chat-completions body. No I/O.

The golden is a body the recorder (scripts/record.py, stdlib json) sent to the real server: the
client's bytes for the same inputs must be identical to it, key order included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.loopd.llama.request import RESERVED_KEYS, chat_body
from boxmaker.loopd.llama.types import ChatRequest
from boxmaker.proto import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from tests.support.client import RECORDINGS, make_config

WEATHER = ToolSchema(
    "get_weather",
    "Get the current weather for a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
    },
)


REQUIRED = {
    "model",
    "messages",
    "id_slot",
    "cache_prompt",
    "stream",
    "return_progress",
    "timings_per_token",
    "reasoning_control",
    "max_tokens",
    "chat_template_kwargs",
}


def recorded(name: str) -> bytes:
    return (RECORDINGS / f"{name}.request.json").read_bytes()


def config_like_the_recorder(sock_dir: Path, max_tokens: int) -> Any:
    return make_config(
        sock_dir / "s.sock",
        model="SmolLM2-135M-Instruct.Q4_1",
        max_tokens=max_tokens,
        sampling={"temperature": 0.0, "seed": 42},
    )


def test_plain_request_is_byte_identical_to_the_recorded_one(sock_dir: Path) -> None:
    req = ChatRequest(
        0,
        (SystemMessage("You are a helpful assistant."), UserMessage("Say hello.")),
        thinking=False,
    )
    assert chat_body(req, config_like_the_recorder(sock_dir, 32)) == recorded("plain")


def test_thinking_history_and_tools_render_the_recorded_requests(sock_dir: Path) -> None:
    # The recorder's key order inside messages and around tool_choice differs; the JSON is equal.
    history = json.loads(recorded("thinking"))
    msgs = tuple(
        AssistantMessage(m["content"], m["reasoning_content"])
        if m["role"] == "assistant"
        else (SystemMessage if m["role"] == "system" else UserMessage)(m["content"])
        for m in history["messages"]
    )
    cfg = config_like_the_recorder(sock_dir, history["max_tokens"])
    assert orjson.loads(chat_body(ChatRequest(0, msgs), cfg)) == history

    forced = json.loads(recorded("tool_call"))
    req = ChatRequest(
        0,
        (
            SystemMessage("You are a helpful assistant."),
            UserMessage("What is the weather in Paris?"),
            AssistantMessage("<tool_call>", None),
        ),  # the prefill: just the last message
        (WEATHER,),
        thinking=False,
    )
    extra = {"tool_choice": "required", "parallel_tool_calls": False}
    cfg = config_like_the_recorder(sock_dir, forced["max_tokens"])
    assert orjson.loads(chat_body(req, cfg, extra)) == forced


def test_golden_with_every_message_kind_tools_and_sampling(sock_dir: Path) -> None:
    cfg = make_config(
        sock_dir / "s.sock",
        max_tokens=8192,
        sampling={
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 40,
            "min_p": 0.05,
            "repeat_penalty": 1.1,
            "seed": 7,
        },
    )
    req = ChatRequest(
        1,
        (
            SystemMessage("sys"),
            UserMessage('héllo "q"'),
            AssistantMessage(None, "think", (ToolCall("c1", "get_weather", '{"city":"Paris"}'),)),
            ToolMessage("c1", "sunny"),
        ),
        (WEATHER,),
        thinking=True,
    )
    assert chat_body(req, cfg) == (
        b'{"model":"test-model","messages":['
        b'{"role":"system","content":"sys"},'
        b'{"role":"user","content":"h\xc3\xa9llo \\"q\\""},'
        b'{"role":"assistant","content":null,"reasoning_content":"think","tool_calls":'
        b'[{"id":"c1","type":"function","function":{"name":"get_weather",'
        b'"arguments":"{\\"city\\":\\"Paris\\"}"}}]},'
        b'{"role":"tool","tool_call_id":"c1","content":"sunny"}],'
        b'"tools":[{"type":"function","function":{"name":"get_weather",'
        b'"description":"Get the current weather for a city","parameters":{"type":"object",'
        b'"properties":{"city":{"type":"string","description":"The city"}},"required":["city"]}}}],'
        b'"id_slot":1,"cache_prompt":true,"stream":true,"return_progress":true,'
        b'"timings_per_token":true,"reasoning_control":true,"max_tokens":8192,'
        b'"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"repeat_penalty":1.1,"seed":7,'
        b'"chat_template_kwargs":{"enable_thinking":true}}'
    )


def test_same_inputs_same_bytes_and_a_longer_history_extends_the_messages(sock_dir: Path) -> None:
    cfg = make_config(sock_dir / "s.sock")
    turn1 = ChatRequest(0, (SystemMessage("s"), UserMessage("one")))
    turn2 = ChatRequest(0, (*turn1.messages, AssistantMessage("1", None), UserMessage("two")))
    assert chat_body(turn1, cfg) == chat_body(ChatRequest(0, tuple(turn1.messages)), cfg)
    one, two = chat_body(turn1, cfg), chat_body(turn2, cfg)
    cut = one.index(b"]")  # the end of the messages array
    assert two.startswith(one[:cut])
    assert two[two.index(b"]") :] == one[cut:]


def test_required_fields_and_no_unset_sampling(sock_dir: Path) -> None:
    body = orjson.loads(chat_body(ChatRequest(0, (UserMessage("x"),)), make_config(sock_dir / "s")))
    assert set(body) == REQUIRED  # no tools key without tools, no sampling key that is unset
    assert body["cache_prompt"] is body["stream"] is body["return_progress"] is True
    assert body["timings_per_token"] is body["reasoning_control"] is True
    assert body["max_tokens"] == 8192  # the brief's backstop default
    assert body["chat_template_kwargs"] == {"enable_thinking": True}


def test_extra_replaces_in_place_and_appends_in_order(sock_dir: Path) -> None:
    cfg = make_config(sock_dir / "s", sampling={"temperature": 0.8, "seed": 1})
    extra = {"stop": ["</tool_call>"], "temperature": 0.0, "tool_choice": "required"}
    body = orjson.loads(chat_body(ChatRequest(0, (UserMessage("x"),)), cfg, extra))
    keys = list(body)
    assert keys[keys.index("max_tokens") + 1 :] == [
        "temperature",
        "seed",
        "chat_template_kwargs",
        "stop",
        "tool_choice",
    ]
    assert body["temperature"] == 0.0


@pytest.mark.parametrize("key", sorted(RESERVED_KEYS))
def test_extra_may_not_change_what_the_client_relies_on(sock_dir: Path, key: str) -> None:
    with pytest.raises(ValueError, match=f"extra request field '{key}'"):
        chat_body(ChatRequest(0, (UserMessage("x"),)), make_config(sock_dir / "s"), {key: 1})


def test_parallel_tool_calls_is_sent_with_tools_when_set(sock_dir: Path) -> None:
    """[inference] parallel_tool_calls (issue 40): sent on every request that offers tools, after
    the sampling; never sent without tools, nor when unset."""
    cfg = make_config(sock_dir / "s", parallel_tool_calls=False)
    with_tools = orjson.loads(chat_body(ChatRequest(0, (UserMessage("x"),), (WEATHER,)), cfg))
    assert with_tools["parallel_tool_calls"] is False
    bare = orjson.loads(chat_body(ChatRequest(0, (UserMessage("x"),)), cfg))
    assert "parallel_tool_calls" not in bare
    unset = make_config(sock_dir / "s")
    assert "parallel_tool_calls" not in orjson.loads(
        chat_body(ChatRequest(0, (UserMessage("x"),), (WEATHER,)), unset)
    )
