"""Generated conversations for the prefix property (M2b brief section 10), and their checks.

A `Conversation` is the [loop] limits and a list of turns; each turn is the user's text, its
thinking switch, whether the session is closed and resumed from disk before it, and the script
of completions the model gives: some with one or several tool calls (the core tools, find_tool,
call_tool with echo results of random sizes, many over the cap; unknown tools, bad JSON, schema
violations, and repeats drawn from a small pool so the repeat rule fires), usually ending with a
plain answer, sometimes with an HTTP 400 (context full). A limit can end a turn before its script
does; the rest of that script is dropped.

Hypothesis prints the failing `Conversation` (its repr is the whole script), which is what
reproduces it (DECISIONS.md: the seeded generator may be hypothesis strategies).

`drive_core` runs a conversation through the sans-IO core alone, with no server and no disk, so
the property can be checked over many examples; `check_requests` and `check_log` are the checks,
shared with the runs through the fake server.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import strategies as st

from boxmaker.loopd.llama.errors import HttpStatus
from boxmaker.loopd.llama.types import Completion, FinishReason
from boxmaker.loopd.tools.registry import CALL_TOOL, FIND_TOOL
from boxmaker.loopd.turn.limits import TRUNCATED_MARK, LoopLimits
from boxmaker.loopd.turn.loop import Append, Complete, Done, Emit, RunTools, TurnLoop
from boxmaker.proto import (
    Assistant,
    CacheLoss,
    SessionStart,
    Timings,
    ToolCall,
    ToolResult,
    TurnDone,
    Usage,
    WireError,
    format_time,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session.baseline import Baseline
from boxmaker.session.replay import request_messages
from tests.support.fake_tools import FakeTools, fake_registry
from tests.support.turn import START, Said, Ticker, baseline

NOON = "2026-11-30T12:00:00.000Z"


@dataclass(frozen=True)
class TurnScript:
    text: str
    thinking: bool
    resume_before: bool
    completions: tuple[Said, ...]


@dataclass(frozen=True)
class Conversation:
    tool_iterations: int
    repeat_detection: bool
    tool_result_cap: int
    turns: tuple[TurnScript, ...]

    @property
    def limits(self) -> LoopLimits:
        return LoopLimits(self.tool_iterations, self.repeat_detection, self.tool_result_cap)

    def loop_config(self, parallel: bool = True) -> dict[str, Any]:
        return {
            "tool_iterations": self.tool_iterations,
            "repeat_detection": self.repeat_detection,
            "tool_result_cap": self.tool_result_cap,
            "parallel_tools": parallel,
            "tool_timeout_ms": 5000,
        }


# ---- strategies -------------------------------------------------------------------------------

# Multi-byte characters, quotes, backslashes and newlines: what JSON and the cap must get right.
ECHO_TEXT = st.text(alphabet='ab é€😀\n"\\\t', max_size=200)

# A small pool, so that a turn often repeats a call byte for byte.
POOL: tuple[tuple[str, str], ...] = (
    ("clock", "{}"),
    (FIND_TOOL, '{"query":"echo"}'),
    (CALL_TOOL, '{"name":"echo","arguments":{"text":"pool"}}'),
)


def _json(obj: object) -> str:
    return orjson.dumps(obj).decode()


CALL_SPECS = st.one_of(
    st.sampled_from(POOL),
    ECHO_TEXT.map(lambda t: (CALL_TOOL, _json({"name": "echo", "arguments": {"text": t}}))),
    st.sampled_from(["echo", "ECHO", "nothing", "", "time"]).map(
        lambda q: (FIND_TOOL, _json({"query": q}))
    ),
    st.sampled_from(
        [
            ("teleport", "{}"),  # unknown
            ("echo", '{"text":"direct"}'),  # not core: only through call_tool
            ("clock", "{"),  # not JSON
            ("clock", "[]"),  # not an object
            (CALL_TOOL, '{"name":"echo","arguments":{"text":1}}'),  # against the schema
            (CALL_TOOL, '{"name":"nope","arguments":{}}'),  # unknown through call_tool
            (CALL_TOOL, '{"name":"clock","arguments":{}}'),  # core through call_tool
        ]
    ),
)

OPT_TEXT = st.none() | st.text(max_size=30)


@st.composite
def completions(draw: st.DrawFn, turn: int) -> tuple[Said, ...]:
    rounds = draw(st.integers(0, 4))
    out: list[Said] = []
    for r in range(rounds):
        specs = draw(st.lists(CALL_SPECS, min_size=1, max_size=3))
        calls = tuple(ToolCall(f"t{turn}r{r}c{i}", n, a) for i, (n, a) in enumerate(specs))
        out.append(Said(draw(OPT_TEXT), draw(OPT_TEXT), calls))
    if draw(st.integers(0, 9)) == 0:  # now and then the context is full
        out.insert(draw(st.integers(0, len(out))), Said(status=400))
    out.append(Said(draw(OPT_TEXT), draw(OPT_TEXT)))
    return tuple(out)


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 5) -> Conversation:
    n = draw(st.integers(1, max_turns))
    turns = tuple(
        TurnScript(
            draw(st.text(max_size=30)),
            draw(st.booleans()),
            draw(st.booleans()) if t else False,
            draw(completions(t)),
        )
        for t in range(n)
    )
    return Conversation(
        draw(st.integers(1, 6)), draw(st.booleans()), draw(st.integers(8, 120)), turns
    )


# ---- the core alone -----------------------------------------------------------------------------


@dataclass
class CoreRun:
    records: list[LogRecord]
    requests: list[dict[str, Any]]  # messages and tools, as the request would carry them
    outcomes: list[TurnDone | WireError]


class _Cache:
    """The same prompt-cache model as support.ScriptedModel, on the request's JSON."""

    def __init__(self) -> None:
        self.held = b""

    def timings(self, body: dict[str, Any], said: Said) -> Timings:
        prompt = b"".join(orjson.dumps(x) + b"\n" for x in [body["tools"], *body["messages"]])
        n = 0
        while n < min(len(prompt), len(self.held)) and prompt[n] == self.held[n]:
            n += 1
        generated = orjson.dumps(said.message().to_json()) + b"\n"
        self.held = prompt + generated
        return Timings(n, len(prompt) - n, len(generated))


def drive_core(conv: Conversation, base: Baseline | None = None) -> CoreRun:
    """Runs every turn through TurnLoop with no I/O: completions from the script, FakeTools."""
    base = base or baseline()
    records: list[LogRecord] = [SessionStart(format_time(START), "s1", 0, 0, base.hash)]
    run = CoreRun(records, [], [])
    port = FakeTools(clock=lambda: NOON)
    cache = _Cache()
    clock = Ticker()
    for turn in conv.turns:
        script = list(turn.completions)
        core = TurnLoop(
            baseline=base,
            records=records,
            content=turn.text,
            thinking=turn.thinking,
            registry=fake_registry(),
            limits=conv.limits,
            clock=clock,
        )
        action = core.start()
        while not isinstance(action, Done):
            result: object = None
            if isinstance(action, Complete):
                body = {
                    "messages": [m.to_json() for m in action.request.messages],
                    "tools": [t.to_openai() for t in action.request.tools],
                }
                run.requests.append(body)
                said = script.pop(0)
                if said.status is not None:
                    result = HttpStatus(said.status, "the request exceeds the context size")
                else:
                    result = Completion(
                        "c",
                        said.content,
                        said.reasoning,
                        said.calls,
                        FinishReason.TOOL_CALLS if said.calls else FinishReason.STOP,
                        cache.timings(body, said),
                        0,
                        False,
                    )
            elif isinstance(action, RunTools):
                result = tuple(port.call(r) for r in action.requests)
            elif isinstance(action, Append):
                records.append(action.record)
            else:
                assert isinstance(action, Emit)
            action = core.send(result)
        run.outcomes.append(action.outcome)
    return run


# ---- the checks -------------------------------------------------------------------------------


def check_requests(requests: Sequence[dict[str, Any]]) -> None:
    """The brief's property: each request's messages start with the previous one's, as JSON
    values, and `tools` and the first message are the same across the session."""
    assert requests, "no request was made"
    first = requests[0]
    for i, (a, b) in enumerate(itertools.pairwise(requests), start=1):
        n = len(a["messages"])
        assert b["messages"][:n] == a["messages"], f"request {i + 1} does not extend request {i}"
        assert len(b["messages"]) > n, f"request {i + 1} adds nothing to request {i}"
        assert b.get("tools") == first.get("tools"), f"request {i + 1} changed the tools"
        assert b["messages"][0] == first["messages"][0], f"request {i + 1} changed the system"


def check_replay(base: Baseline, records: Sequence[LogRecord], requests: Sequence[Any]) -> None:
    """`messages(baseline, records)` alone: the messages of every prefix of the log extend the
    previous prefix's, and every request is a prefix of the whole log's replay."""
    previous: list[Any] = []
    for k in range(1, len(records) + 1):
        now = [m.to_json() for m in request_messages(base, records[:k])]
        assert now[: len(previous)] == previous, f"record {k} changed an earlier message"
        previous = now
    for i, body in enumerate(requests, start=1):
        assert previous[: len(body["messages"])] == body["messages"], f"request {i} vs the log"


def check_log(conv: Conversation, records: Sequence[LogRecord]) -> None:
    """What every log of the loop keeps true, whatever the conversation."""
    assert not [r for r in records if isinstance(r, CacheLoss)], "the prompt cache was lost"
    calls = [r.call for r in records if isinstance(r, ToolResult)]
    assert calls == list(range(len(calls))), "call numbers are not 0, 1, 2, ... in log order"
    for i, r in enumerate(records):
        if isinstance(r, Assistant):
            assert isinstance(records[i + 1], Usage), "Usage right after each Assistant"
        if isinstance(r, ToolResult):
            size = len(r.content.encode("utf-8"))
            if r.truncated:
                assert r.content.endswith(TRUNCATED_MARK)
                assert size - len(TRUNCATED_MARK.encode()) <= conv.tool_result_cap
            else:
                assert size <= conv.tool_result_cap
    # Every call is answered, in call order, before the next completion or user message.
    pending: list[str] = []
    for r in records:
        if isinstance(r, ToolResult):
            assert pending, "a tool result with no call"
            assert r.tool_call_id == pending.pop(0), "tool results out of call order"
        elif isinstance(r, Assistant | SessionStart) or type(r).__name__ == "User":
            assert not pending, f"calls {pending} left without a result"
            if isinstance(r, Assistant):
                pending = [c.id for c in r.tool_calls]
    assert not pending, f"calls {pending} left without a result at the end"
