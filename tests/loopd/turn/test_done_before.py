"""A turn ended by its limits says what it changed before it ended (turn.outcome.done_before):
the tool model often writes the file right and calls on until the repeat rule or
tool_iterations ends the turn, and the owner's error line must not read as "nothing done"."""

from __future__ import annotations

from boxmaker.loopd.turn.outcome import done_before
from boxmaker.proto import (
    Assistant,
    ErrorCode,
    ResultClass,
    ToolCall,
    ToolResult,
    User,
    WireError,
)
from boxmaker.proto.log import LogRecord
from tests.support.nudge_turn import START, T, completion, run

WRITE = '{"path": "a.txt", "content": "abc"}'


def answered(message: str, *calls: tuple[str, str]) -> list[LogRecord]:
    """The owner's message, then each (tool, result) answered in a round of its own."""
    out: list[LogRecord] = [User(T, message)]
    for i, (tool, result) in enumerate(calls):
        call = ToolCall(f"{message[:3]}{i}", tool, "{}")
        out += [Assistant(T, None, None, (call,)),
                ToolResult(T, i, call.id, result, ResultClass.PUBLIC, False, False)]  # fmt: skip
    return out


def test_the_repeat_rule_ending_a_turn_names_the_write_that_ran() -> None:
    replies = [completion(None, ToolCall(f"w{i}", "write_file", WRITE)) for i in range(3)]
    for nudge in (False, True):
        _, _, out = run(list(replies), iter(["wrote a.txt: 3 bytes"]), "save abc to a.txt",
                        nudge=nudge)  # fmt: skip
        assert isinstance(out, WireError)
        assert out.code is ErrorCode.TURN_LIMIT
        assert out.message == (
            "a repeated tool call was repeated again (repeat_detection), so the turn ends. "
            "Done before it ended: wrote a.txt: 3 bytes."
        )


def test_a_turn_that_changed_nothing_ends_as_before() -> None:
    replies = [completion(None, ToolCall(f"c{i}", "clock", f'{{"n": {i}}}')) for i in range(3)]
    _, _, out = run(replies, iter(["noon"] * 2), tool_iterations=2)
    assert isinstance(out, WireError)
    assert (
        out.message
        == "the turn reached its limit of 2 tool rounds (tool_iterations), so it ends here."
    )


def test_only_this_turns_writes_edits_and_notes_that_ran_are_named_once_each() -> None:
    records = [START, *answered("copy it", ("write_file", "wrote old.txt: 1 bytes")),
               *answered("fix b.txt and note it",
                         ("write_file", "error: denied: the owner did not approve (no)"),
                         ("read_file", "wrote this text myself\n"),
                         ("edit_file", "edited b.txt: now 9 bytes\n"),
                         ("edit_file", "edited b.txt: now 9 bytes\n"),
                         ("note", "noted in memory/core.md"),
                         ("shell", "wrote nothing"),
                         ("write_file", "not run: you have not read b.txt"))]  # fmt: skip
    assert (
        done_before(records)
        == " Done before it ended: edited b.txt: now 9 bytes; noted in memory/core.md."
    )
    assert done_before([START, *answered("hi", ("read_file", "x"))]) == ""


def test_past_five_the_rest_are_counted() -> None:
    writes = [("write_file", f"wrote {i}.txt: 1 bytes") for i in range(7)]
    said = done_before([START, *answered("write seven files", *writes)])
    assert said == (
        " Done before it ended: wrote 0.txt: 1 bytes; wrote 1.txt: 1 bytes; wrote 2.txt: 1 bytes; "
        "wrote 3.txt: 1 bytes; wrote 4.txt: 1 bytes; and 2 more."
    )


def test_a_long_result_line_is_cut() -> None:
    long = "wrote " + "d/" * 300 + "a.txt: 1 bytes"
    said = done_before([START, *answered("write it", ("write_file", long))])
    assert said == f" Done before it ended: {long[:197]}...."
