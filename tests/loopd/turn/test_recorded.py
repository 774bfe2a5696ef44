"""turn.recorded: what the log shows of a turn delivered before (M4 section 6)."""

from __future__ import annotations

from boxmaker.loopd.turn.recorded import recorded_answer
from boxmaker.proto import (
    Assistant,
    CacheLoss,
    ErrorCode,
    SessionStart,
    Stopped,
    ToolCall,
    ToolResult,
    TurnDone,
    TurnUsage,
    Usage,
    User,
    WireError,
)
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import ResultClass

T = "2026-12-02T08:00:00.000Z"
START: LogRecord = SessionStart(T, "mm.c", 0, 0, "0" * 64)
CALL = ToolCall("c0", "clock", "{}")


def said(text: str | None, *calls: ToolCall) -> Assistant:
    return Assistant(T, text, None, calls)


def usage(n: int) -> Usage:
    return Usage(T, n, n + 1, n + 2, 0, False)


def result() -> ToolResult:
    return ToolResult(T, 0, "c0", "12:00", ResultClass.PUBLIC, False, False)


def test_no_turn_of_that_ref_is_none() -> None:
    records = [START, User(T, "hi"), said("hello"), usage(1), User(T, "x", "mm:b")]
    assert recorded_answer(records, "mm:a") is None
    assert recorded_answer([START], "mm:a") is None


def test_a_finished_turn_gives_its_last_answer_and_usage() -> None:
    records = [START, User(T, "hi", "mm:a"), said(None, CALL), usage(1), result()]
    records += [said("it is noon"), usage(5), CacheLoss(T, 3, 1), User(T, "next", "mm:b")]
    records += [said("later"), usage(9)]
    assert recorded_answer(records, "mm:a") == TurnDone("it is noon", TurnUsage(5, 6, 7, 0, False))
    assert recorded_answer(records, "mm:b") == TurnDone("later", TurnUsage(9, 10, 11, 0, False))


def test_a_kept_turn_without_its_usage_answers_with_zeros() -> None:
    records = [START, User(T, "hi", "mm:a"), said("kept")]  # a compaction kept no usage
    assert recorded_answer(records, "mm:a") == TurnDone("kept", TurnUsage(0, 0, 0, 0, False))


def interrupted(records: list[LogRecord]) -> bool:
    got = recorded_answer(records, "mm:a")
    return isinstance(got, WireError) and got.code is ErrorCode.INTERRUPTED


def test_every_cut_shape_is_interrupted() -> None:
    head: list[LogRecord] = [START, User(T, "hi", "mm:a")]
    assert interrupted(head)  # cut before the first completion
    assert interrupted([*head, said(None, CALL), usage(1)])  # cut while its tool ran
    assert interrupted([*head, said(None, CALL), usage(1), result()])  # before the next ask
    assert interrupted([*head, Stopped(T, "half")])  # stopped
    assert interrupted([*head, said("partial?"), usage(1), result()])  # not an answer
    assert interrupted([*head, User(T, "next turn", "mm:b"), said("b's answer")])
