"""The inference path against a REAL llama-server through a REAL inferproxy (issue 4, item 8).

Every test that takes `stack` runs twice: against a single-model server and against a router
(tests/support/stack.py). The model is the tiny SmolLM2-135M at temperature 0, answers are kept
short, and each server is started once per session.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import HttpStatus
from boxmaker.loopd.llama.info import CacheHit, CacheMiss, cache_outcome, template_sha256
from boxmaker.loopd.llama.types import (
    ChatEvent,
    ChatRequest,
    Completion,
    FinishReason,
    ToolCallDelta,
)
from boxmaker.loopd.selftest import CHECKS, iter_selftest
from boxmaker.proto import (
    AssistantMessage,
    ContentEvent,
    ProgressEvent,
    ReasoningEvent,
    RetryingEvent,
    SystemMessage,
    ThinkingCappedEvent,
    ToolSchema,
    UserMessage,
)
from boxmaker.verify.tee import Tee
from tests.support import rawhttp
from tests.support.procs import wait_for
from tests.support.stack import BOUND, Stack

SYSTEM = SystemMessage("You are a helpful assistant.")
# Two earlier turns that show <think>...</think> then an answer: without them the small model
# never closes its thinking block on its own (scripts/record.py measured this).
THINKING_SHOTS = (
    UserMessage("What is 1+1?"),
    AssistantMessage("2", "1 plus 1 is 2.\n"),
    UserMessage("What is the capital of Italy?"),
    AssistantMessage("Rome", "Italy's capital city is Rome.\n"),
)
LONG_ESSAY = "Write a very long and detailed essay about the history of Rome, century by century."
GET_TIME = ToolSchema(
    "get_time",
    "Returns the current time in a time zone.",
    {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
)
FORCED_TOOL = {"tool_choice": "required", "parallel_tool_calls": False}


class Recorder:
    """Collects the events of one request, in order, from the client's thread."""

    def __init__(self) -> None:
        self.events: list[ChatEvent] = []

    def __call__(self, event: ChatEvent) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def index(self, kind: type[Any]) -> int:
        return next(i for i, e in enumerate(self.events) if isinstance(e, kind))


def nonce() -> str:
    """A prefix that no earlier request shared, so the slot's cache cannot cover the prompt."""
    return f"[{uuid.uuid4().hex}] "


# ---- an independent fold of the raw stream -----------------------------------------------------


def fold(raw: bytes) -> dict[str, Any]:
    """What a raw HTTP response says, by the OpenAI streaming rules, using only the test helpers.

    A field that no delta ever set as a string stays None, as in the client's Completion.
    """
    res = rawhttp.parse_response(raw)
    assert res.status == 200, res.raw[:300]
    assert res.chunked, res.headers
    out: dict[str, Any] = {
        "id": None,
        "content": None,
        "reasoning_content": None,
        "finish_reason": None,
        "timings": None,
    }
    calls: dict[int, dict[str, str]] = {}
    for chunk in rawhttp.sse_json(dechunk_through_done(res.body)):
        out["id"] = out["id"] or chunk.get("id")
        if "timings" in chunk:
            t = chunk["timings"]
            out["timings"] = (t["cache_n"], t["prompt_n"], t["predicted_n"])
        for choice in chunk.get("choices", []):
            delta = choice.get("delta", {})
            for key in ("content", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    out[key] = (out[key] or "") + delta[key]
            for call in delta.get("tool_calls", []):
                slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] = slot["id"] or call.get("id") or ""
                fn = call.get("function", {})
                slot["name"] = slot["name"] or fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            out["finish_reason"] = out["finish_reason"] or choice.get("finish_reason")
    out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


def dechunk_through_done(body: bytes) -> bytes:
    """A chunked stream body decoded as far as it is whole.

    The client closes its connection once it has read `[DONE]`, and a router that sees the close
    may end its own without the terminating `0` chunk, so only the part up to `[DONE]` is
    required to be complete.
    """
    out = bytearray()
    pos = 0
    while (end := body.find(b"\r\n", pos)) >= 0:
        size = int(body[pos:end].split(b";")[0], 16)
        if size == 0 or end + 2 + size + 2 > len(body):
            break
        out += body[end + 2 : end + 2 + size]
        assert body[end + 2 + size : end + 4 + size] == b"\r\n", f"bad chunk at {pos}"
        pos = end + 4 + size
    assert b"data: [DONE]" in out, f"the stream is cut before [DONE]: {bytes(out[-200:])!r}"
    return bytes(out)


def as_folded(c: Completion) -> dict[str, Any]:
    return {
        "id": c.id,
        "content": c.content,
        "reasoning_content": c.reasoning_content,
        "finish_reason": str(c.finish_reason),
        "timings": (c.timings.cache_n, c.timings.prompt_n, c.timings.predicted_n),
        "tool_calls": [
            {"id": t.id, "name": t.name, "arguments": t.arguments} for t in c.tool_calls
        ],
    }


STREAMS: dict[str, tuple[ChatRequest, dict[str, Any]]] = {
    "thinking_then_answer": (
        ChatRequest(0, (SYSTEM, *THINKING_SHOTS, UserMessage("What is the capital of France?"))),
        {},
    ),
    "plain": (ChatRequest(0, (SYSTEM, UserMessage("Say hello.")), thinking=False), {}),
    "tool_call": (
        ChatRequest(
            0,
            (
                UserMessage("What time is it in Tokyo? Use get_time."),
                AssistantMessage("<tool_call>", None),
            ),
            (GET_TIME,),
            thinking=False,
        ),
        FORCED_TOOL,
    ),
}


@pytest.mark.parametrize("scenario", list(STREAMS))
def test_streamed_answer_reassembles_exactly(stack: Stack, tee: Tee, scenario: str) -> None:
    req, extra = STREAMS[scenario]
    client = stack.client(socket_path=tee.listen)
    rec = Recorder()
    completion = client.chat(req, rec, extra=extra)

    [ex] = tee.chat_exchanges()
    ex.wait_closed()
    # The bytes sent are the client's own render of the request, and what came back folds, by
    # an independent reading, into exactly the Completion the client returned.
    assert bytes(ex.request).endswith(b"\r\n\r\n" + client.request_body(req, extra))
    assert as_folded(completion) == fold(bytes(ex.response))
    # The events carry the same text, piece by piece.
    assert "".join(e.text for e in rec.of(ContentEvent)) == (completion.content or "")
    assert "".join(e.text for e in rec.of(ReasoningEvent)) == (completion.reasoning_content or "")
    for i, call in enumerate(completion.tool_calls):
        pieces = [d.arguments for d in rec.of(ToolCallDelta) if d.index == i]
        assert "".join(pieces) == call.arguments

    # Each scenario shows what it is for.
    if scenario == "thinking_then_answer":
        assert completion.reasoning_content
        assert completion.content
        assert completion.reasoning_tokens > 0
    elif scenario == "plain":
        assert completion.content
        assert completion.reasoning_content is None
    else:
        assert completion.finish_reason is FinishReason.TOOL_CALLS
        assert [c.name for c in completion.tool_calls] == ["get_time"]


def test_progress_events_come_during_a_long_prompt(stack: Stack) -> None:
    lines = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(16))
    req = ChatRequest(
        0, (UserMessage(nonce() + "Count the lines below.\n" + lines),), thinking=False
    )
    rec = Recorder()
    completion = stack.client(inference={"max_tokens": 4}).chat(req, rec)

    progress = rec.of(ProgressEvent)
    assert len(progress) >= 3, rec.events  # the server batch is 64 tokens; the prompt ~230
    processed = [p.processed for p in progress]
    assert processed == sorted(processed)
    prompt_tokens = completion.timings.cache_n + completion.timings.prompt_n
    assert {p.total for p in progress} == {prompt_tokens}
    assert processed[-1] == prompt_tokens
    # All of it before the answer.
    last_progress = max(i for i, e in enumerate(rec.events) if isinstance(e, ProgressEvent))
    assert all(not isinstance(e, ContentEvent) for e in rec.events[:last_progress])


def test_second_turn_hits_the_cache(stack: Stack) -> None:
    client = stack.client()
    first = (SYSTEM, UserMessage(nonce() + "Tell me a short story about a fox."))
    turn1 = client.chat(ChatRequest(0, first, thinking=False), Recorder())
    follow = (
        *first,
        AssistantMessage(turn1.content, turn1.reasoning_content, turn1.tool_calls),
        UserMessage("Now give it a title."),
    )
    turn2 = client.chat(ChatRequest(0, follow, thinking=False), Recorder())

    assert turn1.timings.total > 64  # enough for the 64-token rule to be able to fail
    assert cache_outcome(turn1.timings, turn2.timings) == CacheHit()
    assert turn2.timings.cache_n >= turn1.timings.total - 64
    # The same second turn on the other slot, whose cache holds none of it, is a loss: the check
    # above can fail.
    elsewhere = client.chat(ChatRequest(1, follow, thinking=False), Recorder())
    assert isinstance(cache_outcome(turn1.timings, elsewhere.timings), CacheMiss)


def test_reasoning_end_ends_a_long_reasoning_block(stack: Stack) -> None:
    cap = 16
    client = stack.client(inference={"thinking_cap": cap, "max_tokens": 64})
    req = ChatRequest(0, (SYSTEM, UserMessage(nonce() + LONG_ESSAY)), thinking=True)
    rec = Recorder()
    completion = client.chat(req, rec)

    [capped] = rec.of(ThinkingCappedEvent)
    assert capped.tokens >= cap
    assert completion.thinking_capped
    assert completion.reasoning_content
    # The server ended the block: an answer followed, all of it after the cap, and reasoning
    # stopped a few tokens past it instead of running on to max_tokens.
    assert completion.content
    assert rec.index(ThinkingCappedEvent) < rec.index(ContentEvent)
    assert completion.reasoning_tokens < cap + 16 < completion.timings.predicted_n
    assert completion.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)


def test_prompt_that_does_not_fit_is_http_400(stack: Stack) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 250  # ~2,500 tokens > n_ctx 2,048
    rec = Recorder()
    with pytest.raises(HttpStatus) as caught:
        stack.client().chat_with_retry(ChatRequest(0, (UserMessage(text),), thinking=False), rec)
    assert caught.value.status == 400
    assert "exceed_context_size_error" in caught.value.body
    assert rec.of(RetryingEvent) == []  # a 400 is returned at once, never retried


# ---- the self-test -----------------------------------------------------------------------------


def test_selftest_passes_against_the_server_the_local_profile_describes(stack: Stack) -> None:
    config = stack.config()
    results = list(iter_selftest(config, Client(config.inference)))
    assert [r.check for r in results] == list(CHECKS)
    assert all(r.ok for r in results), [r.line() for r in results]
    props = stack.server.call("GET", stack.server.path("/props")).json()
    assert template_sha256(props["chat_template"]) in results[0].found


def test_selftest_names_each_props_mismatch_with_both_values(stack: Stack) -> None:
    config = stack.config(expect={"n_ctx": 4096, "chat_template_sha256": "0" * 64})
    props, tool_call, cache = list(iter_selftest(config, Client(config.inference)))
    assert not props.ok
    assert "n_ctx is 2048, expected 4096" in props.found
    assert (
        f"chat_template_sha256 is {stack.config().expect.chat_template_sha256}, "
        f"expected {'0' * 64}" in props.found
    )
    assert "total_slots" not in props.found  # it matches, so it is not reported
    # The other two checks still run and still pass: each result says what it found.
    assert tool_call.ok
    assert cache.ok


def test_selftest_tool_call_fails_when_nothing_forces_the_call(single_stack: Stack) -> None:
    # Measured: this model never starts a tool call on its own (issue 4, item 7).
    unforced = {"prefill": None, "tool_choice": "auto", "parallel_tool_calls": None}
    config = single_stack.config(selftest=unforced)
    assert config.selftest.prefill is None
    props, tool_call, cache = list(iter_selftest(config, Client(config.inference)))
    assert props.ok
    assert cache.ok
    assert not tool_call.ok
    # It answers in prose: the result says so, and quotes the answer.
    assert re.match(r"finish_reason (stop|length); no tool call \(content \"", tool_call.found)


def test_selftest_loads_a_router_model_that_is_unloaded(router_stack: Stack) -> None:
    srv = router_stack.server
    res = srv.call("POST", "/models/unload", {"model": srv.model_id})
    assert res.status == 200, res.content()
    wait_for(lambda: srv.model_status() == "unloaded", "the model to unload", BOUND)
    config = router_stack.config()
    results = list(iter_selftest(config, Client(config.inference)))
    assert all(r.ok for r in results), [r.line() for r in results]
    assert srv.model_status() == "loaded"


# ---- a restart under a request -----------------------------------------------------------------


def test_chat_with_retry_survives_inferproxy_killed_and_restarted(stack: Stack) -> None:
    # Retry waits long enough for a Python process to start again on a loaded machine.
    client = stack.client(inference={"retry_delays_ms": [500, 1500, 3000], "max_tokens": 128})
    req = ChatRequest(0, (SYSTEM, UserMessage(nonce() + LONG_ESSAY)), thinking=False)
    killed: list[int | None] = []
    rec = Recorder()

    def on_event(event: ChatEvent) -> None:
        rec(event)
        if isinstance(event, ContentEvent) and not killed:
            # Killed from the client's own thread at the first token, so the kill lands
            # mid-stream: the rest of the answer cannot be in the socket buffer yet.
            killed.append(stack.proxy.pid if stack.proxy else None)
            stack.kill_proxy()

    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=_capture(client.chat_with_retry, req, on_event, outcome))
    worker.start()
    try:
        wait_for(lambda: rec.of(RetryingEvent), "the client to notice and plan a retry", BOUND)
        new_proxy = stack.start_proxy()
    finally:
        worker.join(BOUND * 2)
        if stack.proxy is None:  # the test failed between kill and restart: later tests need it
            stack.start_proxy()
    old_pid = killed[0]
    assert not worker.is_alive()
    assert "error" not in outcome, outcome.get("error")
    completion: Completion = outcome["completion"]

    assert new_proxy.pid != old_pid
    retries = rec.of(RetryingEvent)
    assert retries[0].attempt == 2
    assert retries[0].error.startswith("stream_closed_early"), retries[0]
    assert completion.content
    assert completion.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    # Content came both before the kill and after the last retry.
    last_retry = max(i for i, e in enumerate(rec.events) if isinstance(e, RetryingEvent))
    assert rec.index(ContentEvent) < last_retry
    assert any(isinstance(e, ContentEvent) for e in rec.events[last_retry:])


def _capture(
    call: Callable[..., Completion],
    req: ChatRequest,
    on_event: Callable[[ChatEvent], None],
    outcome: dict[str, Any],
) -> Callable[[], None]:
    def run() -> None:
        try:
            outcome["completion"] = call(req, on_event)
        except BaseException as exc:  # reported by the test's thread
            outcome["error"] = exc

    return run
