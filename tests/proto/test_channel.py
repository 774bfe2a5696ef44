"""proto.channel: every kind and event as exact bytes, round trips, and strict bodies."""

from typing import Any, cast

import pytest

from boxmaker.proto.channel import (
    ANSWER_PART_CHARS,
    EVENT_TYPES,
    AnswerPartEvent,
    ApprovalNeededEvent,
    CacheLossEvent,
    CacheRestoredEvent,
    CacheSavedEvent,
    ChannelBody,
    CompactedEvent,
    CompactingEvent,
    CompactStep,
    ContentEvent,
    ProgressEvent,
    QueuedEvent,
    ReasoningEvent,
    RetryingEvent,
    ThinkingCappedEvent,
    ToolCallStartedEvent,
    ToolResultEvent,
    Turn,
    TurnDone,
    TurnUsage,
    WaitingEvent,
    channel_frame,
    decode_body,
    done_frames,
    event_from_json,
    event_to_json,
)
from boxmaker.proto.errors import BodyError, EncodeError, ProtocolError
from boxmaker.proto.frame import NEED_DATA, Frame, FrameDecoder
from boxmaker.proto.tool import ResultClass
from boxmaker.proto.wire import ErrorCode, WireError

# Every channel body and the exact JSON payload of its frame (after the 4-byte length).
CASES: list[tuple[ChannelBody, bytes]] = [
    (
        # thinking left out (None: loopd's [loop] thinking) is no key at all, never null.
        Turn("s1", "What time is it?", False),
        b'{"kind":"turn","final":true,"body":{"session":"s1","content":"What time is it?",'
        b'"resume":false}}',
    ),
    (
        Turn("s1", "Think.", False, thinking=True),
        b'{"kind":"turn","final":true,"body":{"session":"s1","content":"Think.",'
        b'"resume":false,"thinking":true}}',
    ),
    (
        Turn("s1", "Quick.", True, thinking=False),
        b'{"kind":"turn","final":true,"body":{"session":"s1","content":"Quick.",'
        b'"resume":true,"thinking":false}}',
    ),
    (
        TurnDone("It is 03:48.", TurnUsage(512, 37, 12, 0, False)),
        b'{"kind":"turn_done","final":true,"body":{"content":"It is 03:48.","usage":'
        b'{"cache_n":512,"prompt_n":37,"predicted_n":12,"reasoning_tokens":0,'
        b'"thinking_capped":false}}}',
    ),
    (
        TurnDone(None, TurnUsage(0, 1, 2, 3, True)),
        b'{"kind":"turn_done","final":true,"body":{"content":null,"usage":'
        b'{"cache_n":0,"prompt_n":1,"predicted_n":2,"reasoning_tokens":3,'
        b'"thinking_capped":true}}}',
    ),
    (
        WireError(ErrorCode.SESSION_BUSY, "another turn is running"),
        b'{"kind":"error","final":true,"body":{"code":"session_busy",'
        b'"message":"another turn is running"}}',
    ),
]

EVENTS: list[tuple[Any, bytes]] = [
    (QueuedEvent(2), b'{"type":"queued","ahead":2}'),
    (WaitingEvent(True), b'{"type":"waiting","slot_busy":true}'),
    (ProgressEvent(900, 512, 128), b'{"type":"progress","total":900,"cache":512,"processed":128}'),
    (ReasoningEvent("hm"), b'{"type":"reasoning","text":"hm"}'),
    (ContentEvent("It "), b'{"type":"content","text":"It "}'),
    (AnswerPartEvent("It "), b'{"type":"answer_part","text":"It "}'),
    (ToolCallStartedEvent("clock"), b'{"type":"tool_call_started","name":"clock"}'),
    (
        ToolResultEvent("clock", ResultClass.PUBLIC, False),
        b'{"type":"tool_result","name":"clock","class":"public","truncated":false}',
    ),
    (
        ApprovalNeededEvent("9f", "write_file", "write a: 5 bytes"),
        b'{"type":"approval_needed","id":"9f","tool":"write_file","summary":"write a: 5 bytes"}',
    ),
    (ThinkingCappedEvent(4096), b'{"type":"thinking_capped","tokens":4096}'),
    (
        RetryingEvent(1, 2000, "stream closed early"),
        b'{"type":"retrying","attempt":1,"after_ms":2000,"error":"stream closed early"}',
    ),
    (CacheLossEvent(1024, 37), b'{"type":"cache_loss","expected":1024,"got":37}'),
    (CacheSavedEvent(1745, 49865), b'{"type":"cache_saved","tokens":1745,"elapsed_us":49865}'),
    (CacheRestoredEvent(77, 727), b'{"type":"cache_restored","tokens":77,"elapsed_us":727}'),
    (
        CompactingEvent("threshold", 1540, CompactStep.SUMMARISING, 12),
        b'{"type":"compacting","reason":"threshold","tokens":1540,"step":"summarising",'
        b'"written":12}',
    ),
    (
        CompactedEvent(1, 1602, 705, 8123, ""),
        b'{"type":"compacted","epoch":1,"before":1602,"after":705,"elapsed_ms":8123,"error":""}',
    ),
]
for _event, _json in EVENTS:
    CASES.append((_event, b'{"kind":"turn_event","final":false,"body":{"event":' + _json + b"}}"))


def test_every_event_type_of_the_brief_has_a_case() -> None:
    assert {type(e).TAG for e, _ in EVENTS} == set(EVENT_TYPES)
    assert set(EVENT_TYPES) == {
        "queued", "waiting", "progress", "reasoning", "content", "tool_call_started",
        "tool_result", "thinking_capped", "retrying", "cache_loss",
        "cache_saved", "cache_restored", "approval_needed", "answer_part", "compacting",
        "compacted",
    }  # fmt: skip


@pytest.mark.parametrize(("body", "payload"), CASES, ids=[type(b).__name__ for b, _ in CASES])
def test_channel_frame_bytes_and_round_trip(body: ChannelBody, payload: bytes) -> None:
    data = channel_frame(body)
    assert data == len(payload).to_bytes(4, "big") + payload
    dec = FrameDecoder()
    dec.receive_data(data)
    frame = dec.next_frame()
    assert isinstance(frame, Frame)
    assert decode_body(frame) == body


@pytest.mark.parametrize(("event", "_json"), EVENTS, ids=[type(e).__name__ for e, _ in EVENTS])
def test_events_round_trip_alone(event: Any, _json: bytes) -> None:
    assert event_from_json(event_to_json(event)) == event


BAD_BODIES: list[tuple[Frame, str]] = [
    (Frame("shell", True, {}), 'frame kind "shell" is not a channel kind'),
    (
        Frame("turn_event", True, {"event": {"type": "queued", "ahead": 0}}),
        "turn_event: final must be false",
    ),
    (Frame("turn_done", False, {}), "turn_done: final must be true"),
    (
        Frame("turn", False, {"session": "s", "content": "x", "resume": True}),
        "turn: final must be true",
    ),
    (Frame("error", False, {"code": "internal", "message": ""}), "error: final must be true"),
    (
        Frame("turn", True, {"session": "../etc", "content": "x", "resume": False}),
        "turn.session: expected a session id",
    ),
    (Frame("turn", True, {"session": "s", "content": "x"}), 'turn: missing key "resume"'),
    (
        Frame("turn", True, {"session": "s", "content": "x", "resume": "yes"}),
        "turn.resume: expected boolean, got string",
    ),
    (
        Frame("turn", True, {"session": "s", "content": "x", "resume": True, "thinking": "no"}),
        "turn.thinking: expected boolean, got string",
    ),
    (
        Frame("turn", True, {"session": "s", "content": "x", "resume": True, "thinking": None}),
        "turn.thinking: expected boolean, got null",
    ),
    (
        Frame("turn", True, {"session": "s", "content": "x", "resume": True, "thinking": 0}),
        "turn.thinking: expected boolean, got integer",
    ),
    (
        Frame("turn", True, {"session": "s", "content": "x", "resume": True, "think": False}),
        'turn: unexpected key "think" (the keys are session, content, resume, thinking, compact, '
        "client_ref)",
    ),
    (
        Frame("turn_done", True, {"content": 1, "usage": {}}),
        "turn_done.content: expected string or null, got integer",
    ),
    (
        Frame("turn_done", True, {"content": "", "usage": []}),
        "turn_done.usage: expected object, got array",
    ),
    (
        Frame("turn_done", True, {"content": "", "usage": {"cache_n": 1}}),
        'turn_done.usage: missing key "prompt_n"',
    ),
    (
        Frame("error", True, {"code": "teapot", "message": ""}),
        'error.code: expected one of "bad_request"',
    ),
    (Frame("turn_event", False, {}), 'turn_event: the body is {"event": {...}} and nothing else'),
    (Frame("turn_event", False, {"event": {}, "x": 1}), 'turn_event: the body is {"event": {...}}'),
    (Frame("turn_event", False, {"event": []}), "turn_event.event: expected object, got array"),
    (Frame("turn_event", False, {"event": {"ahead": 1}}), 'turn_event.event: missing key "type"'),
    (
        Frame("turn_event", False, {"event": {"type": "dance"}}),
        "turn_event.event.type: expected an event type (queued, waiting",
    ),
    (
        Frame("turn_event", False, {"event": {"type": "queued", "ahead": True}}),
        "turn_event.event.queued.ahead: expected integer, got boolean",
    ),
    (
        Frame("turn_event", False, {"event": {"type": "progress", "total": 1, "cache": 0}}),
        'turn_event.event.progress: missing key "processed"',
    ),
    (
        Frame("turn_event", False, {"event": {"type": "content", "text": "a", "more": 1}}),
        'turn_event.event.content: unexpected key "more"',
    ),
]


def test_turn_without_thinking_is_none_and_encodes_back_without_the_key() -> None:
    body = decode_body(Frame("turn", True, {"session": "s", "content": "x", "resume": True}))
    assert body == Turn("s", "x", True, thinking=None)  # loopd's [loop] thinking decides
    assert b"thinking" not in channel_frame(body)


@pytest.mark.parametrize(("frame", "words"), BAD_BODIES, ids=[w[:40] for _, w in BAD_BODIES])
def test_bad_bodies_raise_body_error_naming_the_field(frame: Frame, words: str) -> None:
    with pytest.raises(BodyError) as info:
        decode_body(frame)
    assert words in str(info.value)
    assert isinstance(info.value, ProtocolError)  # the edge answers bad_request


def test_encoding_refuses_what_is_not_a_channel_body() -> None:
    with pytest.raises(EncodeError, match="event: expected a TurnEvent, got str"):
        channel_frame(cast(Any, "hello"))
    with pytest.raises(EncodeError, match=r"turn\.session: expected a session id"):
        channel_frame(Turn("a b", "x", True))


@pytest.mark.parametrize("unit", ["a", "\x01", "\U0001f600"])
def test_an_answer_of_any_size_is_split_into_frames_that_each_fit(unit: str) -> None:
    usage = TurnUsage(1, 2, 3, 0, False)
    small = TurnDone(unit * 100, usage)
    assert done_frames(small) == [channel_frame(small)]
    answer = unit * (3 * ANSWER_PART_CHARS + 5) if unit != "a" else "a" * 1_100_000
    dec = FrameDecoder()
    for data in done_frames(TurnDone(answer, usage)):
        dec.receive_data(data)
    bodies = []
    while (frame := dec.next_frame()) is not NEED_DATA:
        bodies.append(decode_body(cast(Frame, frame)))
    *parts, done = bodies
    assert all(isinstance(p, AnswerPartEvent) for p in parts)
    assert isinstance(done, TurnDone)
    assert done.usage == usage
    assert "".join(cast(AnswerPartEvent, p).text for p in parts) + (done.content or "") == answer
