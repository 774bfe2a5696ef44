"""Real llama-server responses (recordings/) replayed byte for byte through the fake server and
read by the real client. What the client reassembles must equal what an independent fold of
the same bytes gives (read_recording + fold in tests/support/client.py: stdlib json and slicing,
none of boxmaker's decoders), so nothing is compared with itself.

The set is whatever recordings/index.json lists as a chat-completions response, so a new
recording is covered without editing this file.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import HttpStatus, ThinkingOverrun
from boxmaker.loopd.llama.info import CONTROL_PATH
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.llama.types import ChatRequest, Completion, ToolCallDelta
from boxmaker.proto import (
    ContentEvent,
    ProgressEvent,
    ReasoningEvent,
    ThinkingCappedEvent,
    Timings,
    ToolCall,
    UserMessage,
)
from tests.support.client import (
    RECORDINGS,
    at,
    fold,
    make_config,
    read_recording,
    recording_index,
)
from tests.support.fakeserver import FakeServer
from tests.support.replies import raw_reply

REQ = ChatRequest(0, (UserMessage("replayed"),))
# Cut into pieces of these sizes, so chunks, events and UTF-8 characters straddle reads.
CUTS = [None, 7, 1000]


def chat_recordings(status: int) -> list[str]:
    return sorted(
        entry["file"]
        for entry in recording_index().values()
        if entry["path"].split("?")[0] == CHAT_PATH and entry["status"] == status
    )


STREAMS = chat_recordings(200)
ERRORS = [name for code in (400, 500, 503) for name in chat_recordings(code)]


def test_the_recordings_are_there() -> None:
    # The brief's transcripts: a plain answer, thinking, a tool call, progress, a forced end.
    names = set(STREAMS)
    expected = {
        "plain.http",
        "thinking.http",
        "tool_call.http",
        "progress.http",
        "reasoning_end.http",
    }
    assert expected <= names, f"missing: {expected - names}"
    assert "too_long.http" in ERRORS


def replay(server: FakeServer, name: str, every: int | None, **keys: Any) -> tuple[Any, list[Any]]:
    raw = (RECORDINGS / name).read_bytes()
    server.on("POST", CHAT_PATH, raw_reply(raw, every=every))
    client = Client(make_config(at(server), **keys))
    events: list[Any] = []
    try:
        return client.chat(REQ, events.append), events
    except Exception as exc:
        return exc, events


@pytest.mark.parametrize("every", CUTS, ids=["whole", "7-bytes", "1000-bytes"])
@pytest.mark.parametrize("name", STREAMS)
def test_stream_reassembles_exactly(fake: FakeServer, name: str, every: int | None) -> None:
    expected = fold(read_recording((RECORDINGS / name).read_bytes()).chunks)
    completion, events = replay(fake, name, every)
    assert isinstance(completion, Completion), completion
    assert completion.id == expected["id"]
    assert completion.content == expected["content"]
    assert completion.reasoning_content == expected["reasoning_content"]
    assert completion.tool_calls == tuple(
        ToolCall(c["id"], c["name"], c["arguments"])
        for _, c in sorted(expected["tool_calls"].items())
    )
    assert str(completion.finish_reason) == expected["finish_reason"]
    assert completion.timings == Timings(*expected["timings"])
    assert completion.reasoning_tokens == expected["reasoning_tokens"]
    assert completion.thinking_capped is False
    # The events carry the same text, piece by piece.
    text = "".join(e.text for e in events if isinstance(e, ContentEvent))
    thought = "".join(e.text for e in events if isinstance(e, ReasoningEvent))
    assert text == (expected["content"] or "")
    assert thought == (expected["reasoning_content"] or "")
    progress = [(e.total, e.cache, e.processed) for e in events if isinstance(e, ProgressEvent)]
    assert progress == expected["progress"]
    for index, call in expected["tool_calls"].items():
        pieces = [e for e in events if isinstance(e, ToolCallDelta) and e.index == index]
        assert "".join(p.arguments for p in pieces) == call["arguments"]


def test_the_recordings_show_what_each_is_for(fake: FakeServer) -> None:
    folded = {n: fold(read_recording((RECORDINGS / n).read_bytes()).chunks) for n in STREAMS}
    assert folded["thinking.http"]["reasoning_content"]
    assert folded["thinking.http"]["content"]
    assert folded["tool_call.http"]["finish_reason"] == "tool_calls"
    call = folded["tool_call.http"]["tool_calls"][0]
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert len(folded["progress.http"]["progress"]) >= 3
    assert folded["plain.http"]["reasoning_content"] is None


@pytest.mark.parametrize("name", ERRORS)
def test_error_recordings_give_their_status_and_body(fake: FakeServer, name: str) -> None:
    recorded = read_recording((RECORDINGS / name).read_bytes())
    error, _ = replay(fake, name, 5)
    assert isinstance(error, HttpStatus), error
    assert error.status == recorded.status
    assert error.body == recorded.body[:4096].decode("utf-8", "replace")


def reasoning_streams() -> list[str]:
    return [n for n in STREAMS if n.startswith(("reasoning_end", "router_reasoning_end"))]


def control_recording(name: str) -> bytes:
    return (RECORDINGS / name.replace(".http", ".control.http")).read_bytes()


@pytest.mark.parametrize("name", reasoning_streams())
def test_recorded_reasoning_capped_by_the_client(fake: FakeServer, name: str) -> None:
    # Cap 3 tokens before the recorded block ends, with an overrun of 4: the cap fires, the
    # recorded control answer says success, and reasoning ends within the grace.
    expected = fold(read_recording((RECORDINGS / name).read_bytes()).chunks)
    tokens = expected["reasoning_tokens"]
    assert tokens >= 8, "the recording should hold a long reasoning block"
    fake.on("POST", CONTROL_PATH, raw_reply(control_recording(name)))
    completion, events = replay(fake, name, 64, thinking_cap=tokens - 3, thinking_overrun=4)
    assert isinstance(completion, Completion), completion
    assert completion.thinking_capped is True
    assert completion.reasoning_content == expected["reasoning_content"]
    assert ThinkingCappedEvent(tokens - 3) in events
    (control,) = fake.requests(CONTROL_PATH)
    assert control.json == {"id": expected["id"], "action": "reasoning_end", "model": "test-model"}


@pytest.mark.parametrize("name", reasoning_streams())
def test_recorded_reasoning_overruns_a_tighter_grace(fake: FakeServer, name: str) -> None:
    expected = fold(read_recording((RECORDINGS / name).read_bytes()).chunks)
    tokens = expected["reasoning_tokens"]
    fake.on("POST", CONTROL_PATH, raw_reply(control_recording(name)))
    error, events = replay(fake, name, 64, thinking_cap=tokens - 3, thinking_overrun=3)
    assert isinstance(error, ThinkingOverrun), error
    assert not any(isinstance(e, ContentEvent) for e in events)
