"""render.py: the text of each event kind, line starts, dimming, and the two stream layouts."""

import re

import pytest

from boxmaker.bxctl.render import (
    DIM,
    RESET,
    Piece,
    Renderer,
    Stream,
    error_line,
    status_line,
    use_color,
)
from boxmaker.bxctl.rows import rewrite_above
from boxmaker.proto import (
    EVENT_TYPES,
    AnswerPartEvent,
    ApprovalNeededEvent,
    CacheLossEvent,
    CacheRestoredEvent,
    CacheSavedEvent,
    CompactedEvent,
    CompactingEvent,
    CompactStep,
    ContentEvent,
    ProgressEvent,
    QueuedEvent,
    ReasoningEvent,
    ResultClass,
    RetryingEvent,
    ThinkingCappedEvent,
    ToolCallStartedEvent,
    ToolResultEvent,
    TurnDone,
    TurnEvent,
    WaitingEvent,
)
from boxmaker.proto.wire import ErrorCode, WireError
from tests.support.bxctl.fakeloopd import USAGE

A, E, X = Stream.ANSWER, Stream.EVENTS, Stream.ERRORS

STATUS: list[tuple[TurnEvent, str | None]] = [
    (QueuedEvent(0), "[queued: 0 turns ahead]"),
    (QueuedEvent(1), "[queued: 1 turn ahead]"),
    (WaitingEvent(True), "[waiting: the inference slot is busy]"),
    (WaitingEvent(False), "[waiting for the inference server]"),
    (ProgressEvent(900, 512, 128), None),
    (ReasoningEvent("hmm"), None),
    (ContentEvent("hi"), None),
    (AnswerPartEvent("hi"), None),
    (ToolCallStartedEvent("clock"), "[tool clock: running]"),
    (ToolResultEvent("clock", ResultClass.PUBLIC, False), "[tool clock: done, public]"),
    (ToolResultEvent("echo", ResultClass.PUBLIC, True), "[tool echo: done, public, truncated]"),
    (
        ApprovalNeededEvent("9f", "note", "append 3 bytes"),
        "[approval needed: brokerd holds a call of note]",
    ),
    (ThinkingCappedEvent(1), "[thinking capped at 1 token]"),
    (ThinkingCappedEvent(2048), "[thinking capped at 2048 tokens]"),
    (RetryingEvent(2, 250, "unavailable"), "[retrying (attempt 2) in 250 ms: unavailable]"),
    (CacheLossEvent(860, 0), "[cache loss: expected 860 cached tokens, got 0]"),
    (CacheSavedEvent(1745, 49_865), "[cache saved: 1745 tokens in 50 ms]"),
    (CacheRestoredEvent(1, 727), "[cache restored: 1 token in 0.7 ms]"),
    (
        CompactingEvent("threshold", 1540, CompactStep.SUMMARISING, 0),
        "[compacting: 1540 tokens in context (threshold); the model writes a summary]",
    ),
    (CompactingEvent("asked", 1540, CompactStep.SUMMARISING, 9), None),  # a live line
    (
        CompactingEvent("asked", 1540, CompactStep.SWITCHING, 57),
        "[compacting: the summary is written (57 tokens); starting the new epoch]",
    ),
    (
        CompactingEvent("asked", 1540, CompactStep.PREWARMING, 57),
        "[compacting: pre-warming: the server reads the new epoch's start, so your next message "
        "is read alone]",
    ),
    (
        CompactedEvent(1, 1602, 705, 8123, ""),
        "[compacted into epoch 1: 1602 -> 705 tokens in 8123 ms]",
    ),
    (
        CompactedEvent(0, 1602, 1602, 9, "the model's summary was empty"),
        "[compaction failed: the model's summary was empty]",
    ),
]


@pytest.mark.parametrize(("event", "line"), STATUS, ids=lambda v: getattr(v, "TAG", ""))
def test_status_lines(event: TurnEvent, line: str | None) -> None:
    assert status_line(event) == line


def test_every_event_kind_is_in_the_table() -> None:
    assert {type(e) for e, _ in STATUS} == set(EVENT_TYPES.values())


def text(pieces: list[Piece], to: Stream | None = None) -> str:
    return "".join(p.text for p in pieces if to is None or p.to is to)


def test_content_streams_as_it_comes_and_the_turn_ends_the_line() -> None:
    r = Renderer(dim=False, split=False)
    assert r.event(ContentEvent("Hel")) == [Piece(A, "Hel")]
    assert r.event(ContentEvent("lo.")) == [Piece(A, "lo.")]
    assert r.done(TurnDone("Hello.", USAGE)) == [Piece(A, "\n")]


def test_answer_parts_are_the_head_of_the_answer_say_prints() -> None:
    r = Renderer(dim=False, split=True, stream_content=False)
    assert r.event(AnswerPartEvent("Hel")) == []
    assert text(r.done(TurnDone("lo.", USAGE)), A) == "Hello.\n"
    assert text(r.done(TurnDone("next", USAGE)), A) == "next\n"  # the parts were that turn's


def test_a_status_line_in_the_middle_of_content_starts_on_its_own_line() -> None:
    r = Renderer(dim=False, split=False)
    out = r.event(ContentEvent("Let me check."))
    out += r.event(ToolCallStartedEvent("clock"))
    out += r.event(ToolResultEvent("clock", ResultClass.PUBLIC, False))
    out += r.event(ContentEvent("It is noon."))
    out += r.done(TurnDone("It is noon.", USAGE))
    assert text(out) == "Let me check.\n[tool clock: done, public]\nIt is noon.\n"


# ---- one line per tool call (issue 18) ---------------------------------------------------------


def calls_and_results(r: Renderer, names: list[str]) -> list[Piece]:
    out = [p for n in names for p in r.event(ToolCallStartedEvent(n))]
    for n in names:
        out += r.event(ToolResultEvent(n, ResultClass.PUBLIC, False))
    return out + r.done(TurnDone("ok", USAGE))


def test_not_on_a_terminal_a_tool_call_is_one_line_printed_with_its_outcome() -> None:
    out = calls_and_results(Renderer(dim=False, split=True), ["clock", "echo"])
    assert text(out, E) == "[tool clock: done, public]\n[tool echo: done, public]\n"
    assert "running" not in text(out)


def test_on_a_terminal_each_call_line_is_completed_in_place() -> None:
    out = calls_and_results(Renderer(dim=False, split=True, live=True), ["clock", "echo"])
    assert text(out, E) == (
        "[tool clock: running]\n[tool echo: running]\n"
        + rewrite_above(2, "[tool clock: done, public]")
        + rewrite_above(1, "[tool echo: done, public]")
    )
    # What a terminal shows once the escapes are played: one line per call, with its outcome.
    assert screen(text(out, E)) == ["[tool clock: done, public]", "[tool echo: done, public]"]


def test_a_call_with_no_result_says_so_on_its_line() -> None:
    r = Renderer(dim=False, split=True, live=True)
    out = r.event(ToolCallStartedEvent("clock")) + r.close()
    assert screen(text(out, E)) == ["[tool clock: no result]"]
    quiet = Renderer(dim=False, split=True)
    assert text(quiet.event(ToolCallStartedEvent("clock")) + quiet.close()) == (
        "[tool clock: no result]\n"
    )


def screen(written: str) -> list[str]:
    """The lines a terminal shows after `written`: newline, CR, cursor up/down, erase line."""
    rows: list[str] = [""]
    row = col = 0
    for m in re.finditer(r"\x1b\[(\d*)([ABK])|\r|\n|[^\x1b\r\n]+", written):
        tok = m.group(0)
        if tok == "\n":
            row, col = row + 1, 0
            rows += [""] * (row + 1 - len(rows))
        elif tok == "\r":
            col = 0
        elif m.group(2) == "A":
            row -= int(m.group(1) or 1)
        elif m.group(2) == "B":
            row += int(m.group(1) or 1)
        elif m.group(2) == "K":
            rows[row] = ""
        else:
            rows[row] = rows[row][:col] + tok + rows[row][col + len(tok) :]
            col += len(tok)
    return [line for line in rows if line]


def test_reasoning_is_dimmed_when_asked_and_never_shares_a_line_with_content() -> None:
    r = Renderer(dim=True, split=False)
    out = r.event(ReasoningEvent("think"))
    out += r.event(ReasoningEvent("ing"))
    out += r.event(ContentEvent("Answer."))
    out += r.done(TurnDone("Answer.", USAGE))
    assert text(out) == f"{DIM}think{RESET}{DIM}ing{RESET}\nAnswer.\n"
    plain = Renderer(dim=False, split=False)  # NO_COLOR: marked where it begins (issue 39.7)
    shown = plain.event(ReasoningEvent("think")) + plain.event(ReasoningEvent("ing"))
    assert text(shown) == "[reasoning] thinking"


# Issue 37 item 5: whatever the model, a tool or a server wrote reaches the terminal escaped.
HOSTILE = [
    "\x1b[8m\x1b[30;40m",  # concealed, black on black: the next line unreadable
    "\x1b[2K\x1b[1A",  # erase, cursor up
    "done\rapprove read_file? ",  # back to column 0
    "\x9b2K",  # C1 CSI
    "\u202eexe.txt",  # right-to-left override
    "\u3164\u3164",  # fillers
    "\x1b]0;title\x07",  # OSC: the window's title
]


def raw(pieces: list[Piece]) -> str:
    return "".join(p.text for p in pieces)


@pytest.mark.parametrize("bad", HOSTILE)
def test_text_from_elsewhere_is_escaped_in_every_line(bad: str) -> None:
    r = Renderer(dim=True, split=False, live=True)
    shown = [
        raw(r.event(ContentEvent(f"hi {bad}"))),
        raw(r.event(ReasoningEvent(f"hm {bad}"))),
        raw(r.event(ToolCallStartedEvent(f"t{bad}"))),
        raw(r.event(ToolResultEvent(f"t{bad}", ResultClass.PUBLIC, False, f"done{bad}"))),
        raw(r.event(RetryingEvent(2, 100, f"oops {bad}"))),
        raw(r.event(CompactedEvent(1, 10, 5, 3, f"no {bad}"))),
        raw(r.done(TurnDone(f"hi {bad}", USAGE))),
        raw(Renderer(dim=False, split=True, stream_content=False).done(TurnDone(bad, USAGE))),
    ]
    for piece in shown:
        cleaned = piece.replace(DIM, "").replace(RESET, "").replace("\x1b[1A\r\x1b[2K", "")
        cleaned = re.sub(r"\x1b\[\d+[AB]\r?|\r\x1b\[2K", "", cleaned)
        assert "\x1b" not in cleaned, repr(piece)
        assert "\r" not in cleaned, repr(piece)
        assert "\x9b" not in cleaned
        assert "\u202e" not in cleaned
        assert "\u3164" not in cleaned


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (None, "done"),
        ("done", "done"),
        ("denied", "denied"),
        ("timed_out", "timed out"),
        ("refused", "refused"),
        ("failed", "failed"),
    ],
)
def test_the_tool_line_says_what_became_of_the_call(outcome: str | None, said: str) -> None:
    event = ToolResultEvent("write_file", ResultClass.PUBLIC, False, outcome)
    assert status_line(event) == f"[tool write_file: {said}, public]"


def test_progress_and_empty_text_show_nothing() -> None:
    r = Renderer(dim=False, split=False)
    assert r.event(ProgressEvent(900, 512, 128)) == []
    assert r.event(ContentEvent("")) == []
    assert r.event(ReasoningEvent("")) == []
    assert r.close() == []


def test_split_streams_keep_their_own_line_state() -> None:
    # --say: the answer is not streamed but printed from turn_done; events go to EVENTS.
    r = Renderer(dim=False, split=True, stream_content=False)
    out = r.event(ReasoningEvent("hmm"))
    out += r.event(ContentEvent("ignored while streaming"))
    out += r.event(WaitingEvent(True))
    out += r.done(TurnDone("The answer.", USAGE))
    assert text(out, A) == "The answer.\n"
    assert text(out, E) == "[reasoning] hmm\n[waiting: the inference slot is busy]\n"


def test_an_answer_that_was_not_streamed_is_printed_at_the_end() -> None:
    r = Renderer(dim=False, split=False)
    assert text(r.done(TurnDone("Only here.\n", USAGE))) == "Only here.\n"
    assert text(r.done(TurnDone(None, USAGE)), E) == "[no answer: the reply had no content]\n"


def test_an_error_closes_open_lines_and_goes_to_errors() -> None:
    r = Renderer(dim=False, split=False)
    out = r.event(ContentEvent("half"))
    out += r.error(WireError(ErrorCode.TURN_LIMIT, "too many tool calls"))
    assert out == [
        Piece(A, "half"),
        Piece(A, "\n"),
        Piece(X, "error turn_limit: too many tool calls\n"),
    ]
    assert error_line(WireError(ErrorCode.SESSION_BUSY, "m")) == "error session_busy: m"


@pytest.mark.parametrize(
    ("isatty", "environ", "expected"),
    [
        (True, {}, True),
        (False, {}, False),
        (True, {"NO_COLOR": "1"}, False),
        (True, {"NO_COLOR": ""}, True),  # no-color.org: set and not empty
        (False, {"NO_COLOR": "1"}, False),
    ],
)
def test_color_only_on_a_terminal_without_no_color(
    isatty: bool, environ: dict[str, str], expected: bool
) -> None:
    assert use_color(isatty, environ) is expected


def test_progress_is_a_live_line_cleared_by_what_comes_next() -> None:
    from boxmaker.bxctl.rows import CLEAR_LINE
    from boxmaker.proto import ContentEvent, ProgressEvent

    live = Renderer(dim=False, split=False, live=True)
    first = live.event(ProgressEvent(900, 0, 128))
    assert [p.text for p in first] == [f"{CLEAR_LINE}[reading the prompt: 128 of 900 tokens]"]
    again = live.event(ProgressEvent(900, 0, 512))
    assert again[0].text.endswith("512 of 900 tokens]")
    content = live.event(ContentEvent("Hi"))
    assert [p.text for p in content] == [CLEAR_LINE, "Hi"]
    assert CLEAR_LINE not in "".join(p.text for p in live.event(ContentEvent(" there")))
    piped = Renderer(dim=False, split=False, live=False)
    assert piped.event(ProgressEvent(900, 0, 128)) == []  # a pipe: nothing, as before
    ended = Renderer(dim=False, split=False, live=True)
    ended.event(ProgressEvent(10, 0, 5))
    assert ended.close()[0].text == CLEAR_LINE  # a turn cut short takes the line away too


def test_the_summarys_size_is_a_live_line_cleared_by_the_next_step() -> None:
    """Issue 30.5: a compaction's summary is rewritten in place as it grows (on a terminal), and
    the next step's line takes its place; a pipe shows the steps alone."""
    from boxmaker.bxctl.rows import CLEAR_LINE

    live = Renderer(dim=False, split=False, live=True)
    start = live.event(CompactingEvent("asked", 900, CompactStep.SUMMARISING, 0))
    assert start[-1].text.endswith("the model writes a summary]\n")
    grown = live.event(CompactingEvent("asked", 900, CompactStep.SUMMARISING, 12))
    assert [p.text for p in grown] == [f"{CLEAR_LINE}[compacting: the summary so far: 12 tokens]"]
    switching = live.event(CompactingEvent("asked", 900, CompactStep.SWITCHING, 30))
    assert switching[0].text == CLEAR_LINE
    assert switching[-1].text.startswith("[compacting: the summary is written (30 tokens)")
    piped = Renderer(dim=False, split=False, live=False)
    assert piped.event(CompactingEvent("asked", 900, CompactStep.SUMMARISING, 12)) == []


def test_a_compact_that_folded_nothing_is_not_an_error_line() -> None:
    """The new-user trial: `/compact` with too few turns printed the reason twice, the second
    time as `error session_full: nothing was folded: ...` on stderr, though nothing is full."""
    from boxmaker.bxctl.render import NOTHING_FOLDED, Stream
    from boxmaker.proto.wire import ErrorCode, WireError

    why = "nothing to fold: the epoch holds 2 turns and keep_turns is 2"
    r = Renderer(dim=False, split=False, live=True)
    assert r.event(CompactedEvent(0, 90, 90, 3, why))[-1].text == f"[nothing to fold yet: {why}]\n"
    pieces = r.error(WireError(ErrorCode.SESSION_FULL, f"nothing was folded: {why}"))
    assert [(p.to, p.text) for p in pieces] == [(Stream.EVENTS, NOTHING_FOLDED + "\n")]
    # a turn's own session_full (a message that says what to do) is still an error
    other = r.error(WireError(ErrorCode.SESSION_FULL, "the session is full: run /compact"))
    assert other[-1].to is Stream.ERRORS


@pytest.mark.parametrize(
    "why",
    [
        "nothing to fold: the epoch holds 0 turns and keep_turns is 2",
        "nothing to fold: the epoch holds 1 turns and keep_turns is 2",
        "nothing to fold: the epoch holds 2 turns and keep_turns is 4",
        "the fold would cut only 3% of the context, under [compact] min_cut 20% (x)",
        "the fold would cut only 0% of the context, under [compact] min_cut 5% (y)",
    ],
)
def test_nothing_to_fold_never_says_compaction_failed(why: str) -> None:
    """Issue 39 item 7: `/compact` with nothing to fold said "compaction failed"."""
    line = status_line(CompactedEvent(0, 90, 90, 3, why))
    assert line == f"[nothing to fold yet: {why}]"
    assert status_line(CompactedEvent(0, 90, 90, 3, "the summary was empty")) == (
        "[compaction failed: the summary was empty]"
    )


def test_a_result_after_an_approval_gets_a_line_of_its_own() -> None:
    """The new-user trial: on a terminal the result of an asked call was written 2 lines up,
    over a line of the approval's question (written by approve.py, which the renderer does not
    count); after an approval the result is a new line."""
    from boxmaker.proto import ApprovalNeededEvent, ResultClass, ToolCallStartedEvent
    from boxmaker.proto import ToolResultEvent as Done

    live = Renderer(dim=False, split=False, live=True)
    live.event(ToolCallStartedEvent("write_file"))
    live.event(ApprovalNeededEvent("9f", "write_file", "write a"))
    pieces = live.event(Done("write_file", ResultClass.PUBLIC, False))
    assert [p.text for p in pieces] == ["[tool write_file: done, public]\n"]
    plain = Renderer(dim=False, split=False, live=True)  # no approval: rewritten in place
    plain.event(ToolCallStartedEvent("read_file"))
    assert "\x1b[1A" in plain.event(Done("read_file", ResultClass.PUBLIC, False))[0].text


NARROW = 40


def _shown(width: int, *events: TurnEvent) -> list[str]:
    from tests.support.screen import Screen

    screen = Screen(width)
    r = Renderer(dim=False, split=False, live=True, width=lambda: width)
    for event in events:
        for piece in r.event(event):
            screen.feed(piece.text)
    return [line for line in screen.lines() if line]


def test_at_40_columns_status_lines_wrap_at_spaces_and_results_land_on_their_own_line() -> None:
    """Issue 39 item 7: at 40 columns the chat's own lines broke mid-word, and a line above a
    wrapped one was rewritten a row too low (rows were counted as lines)."""
    long_tool = "mcp_git_show_the_commit_and_its_diff"
    shown = _shown(
        NARROW,
        ToolCallStartedEvent("read_file"),
        ToolCallStartedEvent(long_tool),
        RetryingEvent(2, 250, "the inference server is unavailable now"),
        ToolResultEvent("read_file", ResultClass.PUBLIC, False),
        ToolResultEvent(long_tool, ResultClass.PUBLIC, False),
    )
    assert shown[0] == "[tool read_file: done, public]"
    assert all(len(line) <= NARROW for line in shown)
    words = set(" ".join(shown).split())
    for text in (f"[tool {long_tool}: running]", "[retrying (attempt 2) in 250 ms: unavailable"):
        assert set(text.split()) <= words, (text, shown)  # no word cut in two
    assert not any("running" in line and "read_file" in line for line in shown)
    assert shown[-1] == "  done, public]"  # the long tool's result: lines of its own, at the end
    assert " ".join(" ".join(shown).split()).endswith(f"[tool {long_tool}: done, public]")


@pytest.mark.parametrize("width", [12, 20, 25, 33, 40, 41, 80])
def test_whatever_the_width_a_result_replaces_its_running_line_or_follows_it(width: int) -> None:
    """Where the running line fits one row it is completed in place; where it does not, the
    result is a line of its own below everything (never over another line)."""
    shown = _shown(
        width,
        ToolCallStartedEvent("read_file"),
        WaitingEvent(True),
        QueuedEvent(3),
        ToolResultEvent("read_file", ResultClass.PUBLIC, False),
    )
    assert all(len(line) <= width for line in shown)
    text = " ".join(" ".join(shown).split())
    assert "[waiting: the inference slot is busy] [queued: 3 turns ahead]" in text
    if width >= len("[tool read_file: done, public]"):
        assert text.startswith("[tool read_file: done, public] [waiting")
    else:
        assert text.startswith("[tool read_file: running] [waiting")
        assert text.endswith("ahead] [tool read_file: done, public]")
