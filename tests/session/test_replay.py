"""session.replay: records to messages, and the prefix property, in memory and across a resume.

The property (M2b brief section 10): the messages of every prefix of a log are a prefix of the
messages of the whole log, compared as JSON values, so each request of a session extends the one
before and the server's prompt cache keeps hitting. It is checked on generated conversations
(user texts; completions with none, one or several tool calls; tool results of random sizes,
some marked truncated; usage and cache-loss records; limits hit mid-turn), on any sequence of
records at all, and across a resume from disk in the middle of a conversation. Hypothesis prints
the failing example, which reproduces it.
"""

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.loopd.llama.request import chat_body
from boxmaker.loopd.llama.types import ChatRequest
from boxmaker.proto import (
    Assistant,
    AssistantMessage,
    CacheLoss,
    ChatMessage,
    EpochEnd,
    ResultClass,
    SessionStart,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    Usage,
    User,
    UserMessage,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session.replay import message, messages, request_messages
from boxmaker.session.store import SessionStore
from tests.support.client import make_config
from tests.support.proto.log_strategies import records as any_record
from tests.support.session.session_cases import BASELINE, CONVERSATION, T0, t

START = SessionStart(T0, "s1", 0, 0, BASELINE.hash)


def as_json(msgs: Sequence[ChatMessage]) -> list[Any]:
    """Messages as the JSON values a request carries (through bytes, as the server sees them)."""
    return [orjson.loads(orjson.dumps(m.to_json())) for m in msgs]


# --- one record, one message ----------------------------------------------------------------------


def test_each_record_type_gives_its_message_or_nothing() -> None:
    call = ToolCall("call_0", "clock", "{}")
    assert message(User(T0, "hi")) == UserMessage("hi")
    assert message(Assistant(T0, "a", "r", (call,))) == AssistantMessage("a", "r", (call,))
    assert message(Assistant(T0, None, None, ())) == AssistantMessage(None, None, ())
    result = ToolResult(T0, 3, "call_0", "12:00", ResultClass.PUBLIC, True, True)
    assert message(result) == ToolMessage("call_0", "12:00")
    for silent in (
        START,
        Usage(T0, 1, 2, 3, 4, True),
        CacheLoss(T0, 5, 0),
        EpochEnd(T0, 0, "s", 1, "0" * 64, 1, 2, 3),
    ):
        assert message(silent) is None


def test_the_conversation_replays_in_order() -> None:
    assert messages(BASELINE, (START, *CONVERSATION)) == [
        UserMessage("What time is it?"),
        AssistantMessage(None, "Call the clock.", (ToolCall("call_0", "clock", "{}"),)),
        ToolMessage("call_0", "2026-11-30T03:48:39Z"),
        AssistantMessage("It is 03:48 UTC.", None, ()),
        UserMessage("Thanks! And in Paris? Ünïcödé ✓"),
        AssistantMessage("04:48 in Paris.", "Paris is UTC+1 in winter.", ()),
    ]


def test_a_request_starts_with_the_baseline_system_message() -> None:
    got = request_messages(BASELINE, (START, *CONVERSATION[:1]))
    assert got == [SystemMessage(BASELINE.system), UserMessage("What time is it?")]
    assert request_messages(BASELINE, ()) == [SystemMessage(BASELINE.system)]


def test_thinking_changes_only_the_generation_switch_never_a_message() -> None:
    msgs = tuple(request_messages(BASELINE, (START, *CONVERSATION)))
    config = make_config(Path("/nonexistent/infer.sock"))
    on = orjson.loads(chat_body(ChatRequest(0, msgs, BASELINE.tools, thinking=True), config))
    off = orjson.loads(chat_body(ChatRequest(0, msgs, BASELINE.tools, thinking=False), config))
    assert on["messages"] == off["messages"] == as_json(msgs)
    assert on["tools"] == off["tools"]
    assert {k for k in on if on[k] != off[k]} == {"chat_template_kwargs"}


# --- generated conversations ----------------------------------------------------------------------

texts = st.text(st.characters(codec="utf-8"), max_size=40)
sizes = st.sampled_from([0, 1, 100, 4096, 16_384, 20_000])


@st.composite
def turn(draw: st.DrawFn, start: int) -> list[LogRecord]:
    """One turn: a user message, then completions until one without tool calls or a limit."""
    i = start
    out: list[LogRecord] = [User(t(i), draw(texts))]
    call_no = start * 10
    for _ in range(draw(st.integers(1, 4))):
        i += 1
        n_calls = draw(st.sampled_from([0, 0, 1, 1, 2, 3]))
        calls = tuple(
            ToolCall(f"call_{call_no + k}", draw(st.sampled_from(["clock", "call_tool"])), "{}")
            for k in range(n_calls)
        )
        content = draw(st.none() | texts)
        out.append(Assistant(t(i), content, draw(st.none() | texts), calls))
        out.append(Usage(t(i), draw(st.integers(0, 3000)), 10, 5, 0, draw(st.booleans())))
        if draw(st.booleans()):
            out.append(CacheLoss(t(i), 800, 0))
        for call in calls:
            size = draw(sizes)
            truncated = size > 16_384
            body = "x" * min(size, 16_384) + ("[truncated]" if truncated else "")
            out.append(
                ToolResult(t(i), call_no, call.id, body, ResultClass.PUBLIC, False, truncated)
            )
            call_no += 1
        if not calls or draw(st.integers(0, 9)) == 0:  # done, or a limit ended the turn
            break
    return out


@st.composite
def conversations(draw: st.DrawFn) -> list[LogRecord]:
    out: list[LogRecord] = []
    for k in range(draw(st.integers(1, 4))):
        out += draw(turn(k * 20 + 1))
    return out


def assert_prefix_property(records: Sequence[LogRecord]) -> None:
    whole = as_json(request_messages(BASELINE, records))
    for k in range(len(records) + 1):
        part = as_json(request_messages(BASELINE, records[:k]))
        assert whole[: len(part)] == part, f"the request after {k} records is not a prefix"
        assert part[0] == whole[0] == {"role": "system", "content": BASELINE.system}


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_every_prefix_of_a_conversation_replays_to_a_prefix(records: list[LogRecord]) -> None:
    assert_prefix_property([START, *records])


@settings(max_examples=300, deadline=None)
@given(st.lists(any_record, max_size=12))
def test_every_prefix_of_any_record_sequence_replays_to_a_prefix(
    records: list[LogRecord],
) -> None:
    assert_prefix_property(records)


def write_in_one_go(home: Path, records: Sequence[LogRecord]) -> bytes:
    with SessionStore(home).create("s1", BASELINE, slot=0, time=T0) as log:
        for r in records:
            log.append(r)
        return log.log_path.read_bytes()


@settings(max_examples=40, deadline=None)
@given(conversations(), st.data())
def test_a_resume_from_disk_mid_conversation_replays_identically(
    records: list[LogRecord], data: st.DataObject
) -> None:
    split = data.draw(st.integers(0, len(records)), label="split")
    config = make_config(Path("/nonexistent/infer.sock"))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        store = SessionStore(home)
        with store.create("s1", BASELINE, slot=0, time=T0) as log:
            for r in records[:split]:
                log.append(r)
            before = as_json(request_messages(log.baseline, log.records))
        # A new store, as a restarted worker would make: everything comes from the files.
        with SessionStore(home).open("s1") as log:
            assert log.baseline == BASELINE
            assert list(log.records) == [START, *records[:split]]
            resumed = as_json(request_messages(log.baseline, log.records))
            assert resumed == before
            for r in records[split:]:
                log.append(r)
            after = request_messages(log.baseline, log.records)
            body = orjson.loads(chat_body(ChatRequest(0, tuple(after), log.baseline.tools), config))
            path = log.log_path
        assert body["messages"][: len(before)] == before
        assert body["tools"] == [tool.to_openai() for tool in BASELINE.tools]
        with SessionStore(home).open("s1") as log:
            assert as_json(request_messages(log.baseline, log.records)) == as_json(after)
            assert list(log.records[1:]) == records
        # The log written across the resume has the bytes of one written in one go.
        assert path.read_bytes() == write_in_one_go(home / "other", records)
