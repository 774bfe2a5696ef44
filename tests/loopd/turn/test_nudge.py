"""The nudge rule (issue 40.2, turn.nudge) in the sans-IO turn loop: advice with no call, or a
claimed write no result shows, gets one logged `[loopd]` user message and one more completion;
never twice a turn, never past tool_iterations, never with `[loop] nudge` off; and the log it
leaves replays to the very request the loop sent (the cache sees an ordinary message)."""

from __future__ import annotations

from collections.abc import Iterator

from boxmaker.loopd.llama.types import ChatRequest, Completion, FinishReason
from boxmaker.loopd.tools.registry import CLOCK_SCHEMA, RegisteredTool, Registry
from boxmaker.loopd.turn.limits import LoopLimits
from boxmaker.loopd.turn.loop import Append, Complete, Done, RunTools, TurnLoop
from boxmaker.loopd.turn.nudge import NUDGE_ADVICE, NUDGE_CLAIM, is_nudge, nudge
from boxmaker.proto import (
    Assistant,
    ResultClass,
    SessionStart,
    Timings,
    ToolCall,
    ToolResponse,
    ToolResult,
    ToolSchema,
    TurnDone,
    User,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session.replay import request_messages
from tests.support.turn import Ticker, baseline

T = "2026-11-30T12:00:00.000Z"
START = SessionStart(T, "s1", 0, 1, baseline().hash)
WRITE = ToolSchema(
    "write_file",
    "Writes a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
ADVICE = "You can use the `read_file` function to read config.ini. Here's how: ..."
CLAIM = "I have written the upper-cased text to b.txt."


def registry() -> Registry:
    return Registry([RegisteredTool(CLOCK_SCHEMA, True), RegisteredTool(WRITE, True)])


def completion(content: str | None, *calls: ToolCall) -> Completion:
    reason = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    return Completion("id", content, None, calls, reason, Timings(0, 10, 2), 0, False)


def drive(
    replies: list[Completion], tools: Iterator[str] | None = None, **limits: object
) -> tuple[list[LogRecord], list[ChatRequest], TurnDone]:
    """The turn run to its end: the records appended, the requests sent, the outcome."""
    loop = TurnLoop(
        baseline=baseline(), records=[START], content="what's the port in config.ini?",
        thinking=False, registry=registry(), limits=LoopLimits(**limits),  # type: ignore[arg-type]
        clock=Ticker(),
    )  # fmt: skip
    tools = tools or iter(())
    appended: list[LogRecord] = []
    requests: list[ChatRequest] = []
    action = loop.start()
    while not isinstance(action, Done):
        result: object = None
        if isinstance(action, Append):
            appended.append(action.record)
        elif isinstance(action, Complete):
            requests.append(action.request)
            result = replies.pop(0)
        elif isinstance(action, RunTools):
            result = tuple(ToolResponse(next(tools), ResultClass.PUBLIC, False, False)
                           for _ in action.requests)  # fmt: skip
        action = loop.send(result)
    assert isinstance(action.outcome, TurnDone), action.outcome
    assert not replies, "every scripted completion was asked for"
    return appended, requests, action.outcome


def users(records: list[LogRecord]) -> list[str]:
    return [r.content for r in records if type(r) is User]


def test_advice_with_no_call_gets_one_nudge_then_the_turn_goes_on() -> None:
    call = ToolCall("c1", "clock", "{}")
    records, requests, done = drive(
        [completion(ADVICE), completion(None, call), completion("It is noon.")],
        iter(["2026-11-30T12:00:00Z"]), nudge=True,
    )  # fmt: skip
    assert users(records) == ["what's the port in config.ini?", NUDGE_ADVICE]
    assert requests[1].messages[-1].to_json() == {"role": "user", "content": NUDGE_ADVICE}
    assert done.content == "It is noon."


def test_a_second_advice_in_the_same_turn_ends_it() -> None:
    records, requests, done = drive([completion(ADVICE), completion(ADVICE)], nudge=True)
    assert users(records) == ["what's the port in config.ini?", NUDGE_ADVICE]
    assert len(requests) == 2
    assert done.content == ADVICE


def test_a_claimed_write_with_no_write_result_is_nudged() -> None:
    call = ToolCall("c1", "clock", "{}")
    records, _, done = drive(
        [completion(None, call), completion(CLAIM), completion("Not done yet, sorry.")],
        iter(["2026-11-30T12:00:00Z"]), nudge=True,
    )  # fmt: skip
    assert users(records)[-1] == NUDGE_CLAIM
    assert done.content == "Not done yet, sorry."


def test_a_claim_the_write_result_supports_ends_the_turn() -> None:
    call = ToolCall("c1", "write_file", '{"path": "b.txt"}')
    records, _, done = drive(
        [completion(None, call), completion(CLAIM)], iter(["wrote b.txt: 5 bytes"]), nudge=True
    )
    assert not any(is_nudge(r) for r in records)
    assert done.content == CLAIM


def test_off_by_default_and_within_the_tool_rounds() -> None:
    records, _, done = drive([completion(ADVICE)])  # [loop] nudge off: as before
    assert users(records) == ["what's the port in config.ini?"]
    call = ToolCall("c1", "clock", "{}")
    # One round allowed, spent by the call: the claim ends the turn un-nudged.
    records, _, done = drive(
        [completion(None, call), completion(CLAIM)], iter(["noon"]), nudge=True,
        tool_iterations=1,
    )  # fmt: skip
    assert not any(is_nudge(r) for r in records)
    assert done.content == CLAIM


def test_what_is_nudged_and_what_is_not() -> None:
    owner: list[LogRecord] = [START, User(T, "copy a.txt upper-cased to b.txt")]
    assert nudge(owner, "I cannot read files from the workspace.") == NUDGE_ADVICE
    assert nudge(owner, "```bash\ncat a.txt\n```") == NUDGE_ADVICE
    assert nudge(owner, "The port is 7411.") is None
    assert nudge(owner, "Done: b.txt has been created.") == NUDGE_CLAIM
    assert nudge(owner, "The file was not written: you denied it.") is None
    assert nudge(owner, "b.txt has not been written, since you said no.") is None
    denied = ToolCall("w", "write_file", '{"path": "b.txt"}')
    refused: list[LogRecord] = [*owner, Assistant(T, None, None, (denied,)),
               ToolResult(T, 0, "w", "error: denied: the owner did not approve", ResultClass.PUBLIC,
                          False, False)]  # fmt: skip
    assert nudge(refused, "I have written b.txt.") == NUDGE_CLAIM  # a denial supports nothing
    assert nudge(refused, "I can't: you did not approve the write.") is None  # a call was made
    nudged: list[LogRecord] = [*owner, User(T, NUDGE_ADVICE)]
    assert nudge(nudged, ADVICE) is None  # once a turn


def test_the_log_with_a_nudge_replays_to_the_request_sent() -> None:
    """The nudge is an ordinary user record: the messages replayed from the log (a resumed
    session's next request) start with every request of the turn, byte for byte."""
    call = ToolCall("c1", "clock", "{}")
    records, requests, _ = drive(
        [completion(ADVICE), completion(None, call), completion("It is noon.")],
        iter(["2026-11-30T12:00:00Z"]), nudge=True,
    )  # fmt: skip
    replayed = [m.to_json() for m in request_messages(baseline(), [START, *records])]
    for request in requests:
        sent = [m.to_json() for m in request.messages]
        assert replayed[: len(sent)] == sent
    assert {"role": "user", "content": NUDGE_ADVICE} in replayed
