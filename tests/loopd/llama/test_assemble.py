"""boxmaker.loopd.llama.assemble on hand-made chunks. No I/O."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from boxmaker.loopd.llama.assemble import Assembler
from boxmaker.loopd.llama.errors import BadResponse, HttpStatus, StreamClosedEarly
from boxmaker.loopd.llama.types import FinishReason, ToolCallDelta
from boxmaker.proto import ContentEvent, ProgressEvent, ReasoningEvent, Timings, ToolCall
from tests.support.client import CID, chunk_obj


def feed_all(chunks: list[dict[str, Any]]) -> tuple[Assembler, list[Any]]:
    asm = Assembler()
    events = [e for c in chunks for e in asm.feed(orjson.dumps(c))]
    return asm, events


def tc(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> dict[str, Any]:
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if arguments is not None:
        fn["arguments"] = arguments
    out: dict[str, Any] = {"index": index, "function": fn}
    if id is not None:
        out |= {"id": id, "type": "function"}
    return out


def test_content_and_reasoning_in_order_with_events() -> None:
    asm, events = feed_all(
        [
            chunk_obj(content=None, progress=(30, 3, 3), predicted=0),
            chunk_obj(reasoning="Let me", predicted=1),
            chunk_obj(reasoning=" think.", predicted=2),
            chunk_obj(content="Hel", predicted=4),
            chunk_obj(content="", predicted=5),
            chunk_obj(content="lo", predicted=6),
            chunk_obj(finish="stop", predicted=6, cache_n=3, prompt_n=27),
        ]
    )
    assert events == [
        ProgressEvent(30, 3, 3),
        ReasoningEvent("Let me"),
        ReasoningEvent(" think."),
        ContentEvent("Hel"),
        ContentEvent("lo"),
    ]
    c = asm.completion()
    assert (c.id, c.content, c.reasoning_content) == (CID, "Hello", "Let me think.")
    assert c.finish_reason is FinishReason.STOP
    assert c.timings == Timings(3, 27, 6)
    assert c.reasoning_tokens == 2
    assert c.tool_calls == ()
    assert c.thinking_capped is False
    assert asm.completion(thinking_capped=True).thinking_capped is True


def test_fields_never_set_stay_none_and_the_null_first_delta_adds_nothing() -> None:
    asm, events = feed_all(
        [
            {
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": None,
                        "delta": {"role": "assistant", "content": None},
                    }
                ],
                "id": CID,
                "timings": {"cache_n": 0, "prompt_n": 5, "predicted_n": 0},
            },
            chunk_obj(finish="length", predicted=0),
        ]
    )
    assert events == []
    c = asm.completion()
    assert (c.content, c.reasoning_content, c.finish_reason) == (None, None, FinishReason.LENGTH)


def test_tool_call_deltas_by_index_across_chunks() -> None:
    asm, events = feed_all(
        [
            chunk_obj(
                tool_calls=[tc(0, id="call-a", name="get_weather", arguments="{")], predicted=1
            ),
            chunk_obj(tool_calls=[tc(1, id="call-b", name="get_time", arguments="")], predicted=2),
            chunk_obj(
                tool_calls=[tc(0, arguments='"city": '), tc(1, arguments='{"tz":')], predicted=3
            ),
            chunk_obj(tool_calls=[tc(1, arguments=' "UTC"}')], predicted=4),
            chunk_obj(tool_calls=[tc(0, arguments='"Paris"}')], predicted=5),
            chunk_obj(finish="tool_calls", predicted=6),
        ]
    )
    assert events[0] == ToolCallDelta(0, "call-a", "get_weather", "{")
    assert events[2] == ToolCallDelta(0, None, None, '"city": ')
    c = asm.completion()
    assert c.tool_calls == (
        ToolCall("call-a", "get_weather", '{"city": "Paris"}'),
        ToolCall("call-b", "get_time", '{"tz": "UTC"}'),
    )
    assert c.finish_reason is FinishReason.TOOL_CALLS
    assert c.content is None


def test_tool_calls_come_out_in_index_order_and_first_id_wins() -> None:
    asm, _ = feed_all(
        [
            chunk_obj(tool_calls=[tc(2, id="late", name="b", arguments="{}")], predicted=1),
            chunk_obj(tool_calls=[tc(0, id="early", name="a", arguments="{}")], predicted=2),
            chunk_obj(tool_calls=[tc(0, id="ignored", name="ignored")], predicted=3),
            chunk_obj(finish="tool_calls", predicted=3),
        ]
    )
    assert [(t.id, t.name) for t in asm.completion().tool_calls] == [("early", "a"), ("late", "b")]


@pytest.mark.parametrize("missing", ["id", "name"])
def test_a_tool_call_without_id_or_name_is_a_bad_response(missing: str) -> None:
    given = {"id": "x", "name": "f"}
    del given[missing]
    asm, _ = feed_all(
        [
            chunk_obj(tool_calls=[tc(0, arguments="{}", **given)], predicted=1),
            chunk_obj(finish="tool_calls", predicted=1),
        ]
    )
    with pytest.raises(BadResponse, match=f"tool call 0 came without its {missing}"):
        asm.completion()


def test_timings_are_the_latest_chunks() -> None:
    asm, _ = feed_all(
        [
            chunk_obj(content="a", predicted=1, cache_n=10, prompt_n=5),
            chunk_obj(content="b"),  # no timings: the last ones stand
            chunk_obj(finish="stop", predicted=2, cache_n=10, prompt_n=6),
        ]
    )
    assert asm.completion().timings == Timings(10, 6, 2)


def test_reasoning_tokens_count_predicted_n_steps_of_reasoning_chunks() -> None:
    asm, _ = feed_all(
        [
            chunk_obj(predicted=1),  # the token before the block, no delta
            chunk_obj(reasoning="a", predicted=4),  # three tokens arrived with this delta
            chunk_obj(reasoning="b"),  # no timings: counts as one
            chunk_obj(reasoning="c", predicted=6),  # 6 - 4
            chunk_obj(content="x", predicted=9),  # content tokens are not reasoning
            chunk_obj(reasoning="late", predicted=10),
            chunk_obj(finish="stop", predicted=10),
        ]
    )
    assert asm.reasoning_tokens == 3 + 1 + 2 + 1


def test_first_finish_reason_stands_and_later_chunks_still_fold() -> None:
    asm, _ = feed_all(
        [
            chunk_obj(content="a", predicted=1),
            chunk_obj(finish="length", predicted=1),
            chunk_obj(finish="stop", predicted=2),
            {"choices": [], "id": CID, "timings": {"cache_n": 1, "prompt_n": 2, "predicted_n": 3}},
        ]
    )
    c = asm.completion()
    assert c.finish_reason is FinishReason.LENGTH
    assert c.timings == Timings(1, 2, 3)


def test_no_finish_reason_is_stream_closed_early() -> None:
    asm, _ = feed_all([chunk_obj(content="partial", predicted=1)])
    assert not asm.finished
    with pytest.raises(StreamClosedEarly, match="without a finish_reason"):
        asm.completion()


def test_no_timings_or_no_id_is_a_bad_response() -> None:
    asm, _ = feed_all([chunk_obj(finish="stop")])
    with pytest.raises(BadResponse, match="no timings"):
        asm.completion()
    asm, _ = feed_all(
        [
            {
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "timings": {"cache_n": 0, "prompt_n": 0, "predicted_n": 0},
            }
        ]
    )
    with pytest.raises(BadResponse, match="no completion id"):
        asm.completion()


@pytest.mark.parametrize(
    ("payload", "error", "message"),
    [
        (b"{not json", BadResponse, "a stream chunk is not JSON"),
        (b"[1,2]", BadResponse, "not a JSON object"),
        (
            orjson.dumps(chunk_obj(finish="cancelled")),
            BadResponse,
            "unknown finish_reason 'cancelled'",
        ),
        (
            orjson.dumps({**chunk_obj(), "choices": [{"index": 0, "delta": {"content": 5}}]}),
            BadResponse,
            r"choices\[0\].delta.content has the wrong type",
        ),
        (
            orjson.dumps(
                {**chunk_obj(), "timings": {"cache_n": 1, "prompt_n": True, "predicted_n": 1}}
            ),
            BadResponse,
            "chunk.timings.prompt_n",
        ),
        (
            orjson.dumps(
                {**chunk_obj(), "timings": {"cache_n": -1, "prompt_n": 1, "predicted_n": 1}}
            ),
            BadResponse,
            "chunk.timings.cache_n must be a non-negative integer",
        ),
        (
            orjson.dumps({**chunk_obj(), "choices": [{"delta": {}}, {"delta": {}}]}),
            BadResponse,
            "expected one choice, got 2",
        ),
        (
            orjson.dumps(chunk_obj(tool_calls=[{"function": {"arguments": "{}"}}])),
            BadResponse,
            r"tool_calls\[0\].index must be a non-negative integer",
        ),
        (b'{"error":{"code":500,"message":"boom","type":"server_error"}}', HttpStatus, "HTTP 500"),
        (b'{"error":{"message":"no code"}}', BadResponse, "the stream carried an error: 'no code'"),
    ],
)
def test_broken_chunks(payload: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Assembler().feed(payload)


def test_an_error_chunk_keeps_the_status_and_the_body() -> None:
    payload = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
    with pytest.raises(HttpStatus) as caught:
        Assembler().feed(payload)
    assert caught.value.status == 503
    assert caught.value.body == payload.decode()


def test_unknown_keys_are_ignored() -> None:
    chunk = chunk_obj(content="a", predicted=1)
    chunk["usage"] = {"completion_tokens": 1}
    chunk["choices"][0]["delta"]["audio"] = {"x": 1}
    chunk["choices"][0]["logprobs"] = None
    assert Assembler().feed(orjson.dumps(chunk)) == [ContentEvent("a")]
