"""What `bxctl chat` shows for each frame of a turn, as text pieces for its streams. [core]

No I/O: the shell (chat.py) writes each piece to the stream it names and flushes. A piece is for
ANSWER (the reply's content) or EVENTS (everything else: reasoning, tool lines, status lines). In
a chat both are stdout; with `--say` ANSWER is stdout and EVENTS is stderr. A turn's error is for
ERRORS, always stderr. The Renderer tracks, per physical stream, whether a streamed run (content
or reasoning) has left the cursor in the middle of a line, so every status line starts in column
0 and reasoning and content never share a line.

A tool call is one line (issue 18). On a terminal (`live`) it appears when the call starts and is
rewritten in place when its result comes (cursor up to its line, the line cleared and written,
cursor back down: parallel calls each keep their own line). Elsewhere (a pipe, a file) the line
is printed once, when the result comes. A call whose line cannot be reached any more (a streamed
run came between) or that never gets a result is finished on a line of its own.

What each event becomes:

| event               | shown                                                               |
|---------------------|---------------------------------------------------------------------|
| `content`           | its text, as it streams (ANSWER)                                    |
| `reasoning`         | its text, as it streams, dimmed when colour is on                   |
| `tool_call_started` | on a terminal `[tool <name>: running]`, completed in place by ...   |
| `tool_result`       | `[tool <name>: <outcome>, <class>]` (done, denied, timed out, ...), |
|                     | `, truncated` when it was cut; not                                  |
|                     | on a terminal, only this line: one line per tool call either way   |
| `queued`            | `[queued: <n> turn(s) ahead]`                                       |
| `waiting`           | `[waiting: the inference slot is busy]` (or: for the server)        |
| `retrying`          | `[retrying (attempt <n>) in <ms> ms: <error>]`                      |
| `thinking_capped`   | `[thinking capped at <n> tokens]`                                   |
| `cache_loss`        | `[cache loss: expected <n> cached tokens, got <m>]`                 |
| `cache_saved`       | `[cache saved: <n> tokens in <t> ms]`                               |
| `cache_restored`    | `[cache restored: <n> tokens in <t> ms]`                            |
| `approval_needed`   | `[approval needed: brokerd holds a call of <tool>]`; the call itself |
|                     | is shown from brokerd's own words (approve.py), never loopd's       |
| `compacting`        | each step: `[compacting: <n> tokens in context (<reason>); the      |
|                     | model writes a summary]`, then on a terminal `[compacting: the      |
|                     | summary so far: <n> tokens]` rewritten in place, `[compacting: the  |
|                     | summary is written (<n> tokens); starting the new epoch]`,          |
|                     | `[compacting: pre-warming: ...]` (then the prompt's `progress`)     |
| `compacted`         | `[compacted into epoch <e>: <n> -> <m> tokens in <t> ms]`, or       |
|                     | `[compaction failed: <why>]`, or `[nothing to fold yet: <why>]`     |
|                     | when there was none to fold (and a `/compact`'s error that only    |
|                     | repeats it is `[nothing was folded: ...]`, not `error session_full`) |
| `progress`          | on a terminal `[reading the prompt: <p> of <n> tokens]`, rewritten  |
|                     | in place as it grows and cleared by what comes next; elsewhere      |
|                     | nothing (llama-server sends many); `--json` shows them              |
| `answer_part`       | nothing itself: the head of an answer too large for one turn_done,  |
|                     | printed with it (`--say`) when content was not streamed             |
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from boxmaker.proto import (
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
    RetryingEvent,
    ThinkingCappedEvent,
    ToolCallStartedEvent,
    ToolResultEvent,
    TurnDone,
    TurnEvent,
    WaitingEvent,
)
from boxmaker.proto.wire import ErrorCode, WireError

from .escape import one_line, streamed
from .rows import CLEAR_LINE, rewrite_above, rows

NOTHING_FOLDED = "[nothing was folded: the conversation goes on as it was]"
# loopd's reasons for a fold it did not try (loopd/turn/compact.py): the session is fine
NOT_NEEDED = ("nothing to fold: ", "the fold would cut only ")

# SGR "faint" and "reset all": widely supported, and reset is safe after any attribute.
DIM = "\x1b[2m"
RESET = "\x1b[0m"
REASONING_MARK = "[reasoning] "  # where reasoning starts, when it cannot be dimmed (NO_COLOR)


class Stream(enum.Enum):
    ANSWER = "answer"  # the reply: stdout
    EVENTS = "events"  # reasoning, tool and status lines: stdout in a chat, stderr with --say
    ERRORS = "errors"  # a turn's error: always stderr


@dataclass(frozen=True, slots=True)
class Piece:
    to: Stream
    text: str


def use_color(isatty: bool, environ: Mapping[str, str]) -> bool:
    """Colour (here: dimmed reasoning) only on a terminal, and never when NO_COLOR is set to a
    non-empty value (no-color.org)."""
    return isatty and not environ.get("NO_COLOR")


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _ms(us: int) -> str:
    """Microseconds as milliseconds, one decimal below 10 ms: `0.7 ms`, `42 ms`."""
    return f"{us / 1000:.1f} ms" if us < 10_000 else f"{round(us / 1000)} ms"


def status_line(event: TurnEvent) -> str | None:
    """The status line for `event` (without its newline), or None for the events that are not
    lines: content and reasoning stream, progress is not shown."""
    match event:
        case QueuedEvent(ahead=ahead):
            return f"[queued: {_plural(ahead, 'turn', 'turns')} ahead]"
        case WaitingEvent(slot_busy=busy):
            return (
                "[waiting: the inference slot is busy]"
                if busy
                else "[waiting for the inference server]"
            )
        case ToolCallStartedEvent(name=name):
            return f"[tool {one_line(name)}: running]"
        case ToolResultEvent(name=name, class_=cls, truncated=truncated, outcome=outcome):
            said = one_line((outcome or "done").replace("_", " "))  # a loopd that does not say
            return (
                f"[tool {one_line(name)}: {said}, {cls.value}{', truncated' if truncated else ''}]"
            )
        case ApprovalNeededEvent(tool=tool):
            # loopd's words are only relayed: the summary shown for approval is brokerd's own
            # (approve.py), never this one, which a compromised loopd could make lie.
            return f"[approval needed: brokerd holds a call of {one_line(tool)}]"
        case ThinkingCappedEvent(tokens=tokens):
            return f"[thinking capped at {_plural(tokens, 'token', 'tokens')}]"
        case RetryingEvent(attempt=attempt, after_ms=after_ms, error=error):
            return f"[retrying (attempt {attempt}) in {after_ms} ms: {one_line(error)}]"
        case CacheLossEvent(expected=expected, got=got):
            return f"[cache loss: expected {expected} cached tokens, got {got}]"
        case CacheSavedEvent(tokens=tokens, elapsed_us=us):
            return f"[cache saved: {_plural(tokens, 'token', 'tokens')} in {_ms(us)}]"
        case CacheRestoredEvent(tokens=tokens, elapsed_us=us):
            return f"[cache restored: {_plural(tokens, 'token', 'tokens')} in {_ms(us)}]"
        case CompactingEvent(step=CompactStep.SWITCHING, written=written):
            return (
                f"[compacting: the summary is written ({written} tokens); starting the new epoch]"
            )
        case CompactingEvent(step=CompactStep.PREWARMING):
            return (
                "[compacting: pre-warming: the server reads the new epoch's start, so your next "
                "message is read alone]"
            )
        case CompactingEvent(reason=reason, tokens=tokens, written=0):
            return (
                f"[compacting: {_plural(tokens, 'token', 'tokens')} in context "
                f"({one_line(reason)}); the model writes a summary]"
            )
        case CompactingEvent():  # the summary's size as it grows: a live line (_live)
            return None
        case CompactedEvent(error=error) if error.startswith(NOT_NEEDED):
            # not a failure: there was nothing (or too little) to fold (issue 39 item 7)
            return f"[nothing to fold yet: {one_line(error)}]"
        case CompactedEvent(error=error) if error:
            return f"[compaction failed: {one_line(error)}]"
        case CompactedEvent(epoch=epoch, before=before, after=after, elapsed_ms=ms):
            return f"[compacted into epoch {epoch}: {before} -> {after} tokens in {ms} ms]"
        case ProgressEvent() | ContentEvent() | ReasoningEvent() | AnswerPartEvent():
            return None
    raise TypeError(f"not a turn event: {event!r}")  # pragma: no cover - the union is closed


def error_line(error: WireError) -> str:
    """One line (without its newline) for an `error` frame: its code, then its message."""
    return f"error {error.code.value}: {one_line(error.message)}"


class _Run(enum.Enum):
    NONE = "none"  # the cursor is at the start of a line
    CONTENT = "content"
    REASONING = "reasoning"


class Renderer:
    """Turns one turn's frames into pieces.

    Args:
        dim: wrap reasoning in DIM ... RESET (use_color's answer for the EVENTS stream).
        split: ANSWER and EVENTS are different streams (`--say`); else they share one.
        stream_content: show content events as they arrive. `--say` turns it off and prints
            the turn_done content instead, so stdout carries exactly the answer.
        live: EVENTS is a terminal: a tool's line is completed in place, progress rewritten.
        width: the terminal's columns now (it may be resized), or None: status lines are
            wrapped at spaces to it, and counted in rows, so a line rewritten in place is found.
    """

    def __init__(
        self,
        *,
        dim: bool,
        split: bool,
        stream_content: bool = True,
        live: bool = False,
        width: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._dim = dim
        self._split = split
        self._stream_content = stream_content
        self._live = live
        self._width = width
        self._runs: dict[Stream, _Run] = {Stream.ANSWER: _Run.NONE, Stream.EVENTS: _Run.NONE}
        self._streamed = False  # some content was shown this turn
        self._head: list[str] = []  # answer_part texts: the head of a turn_done too large
        self._lines = 0  # rows written on EVENTS' stream since the first pending call
        self._one_row = True  # the last line written took one row (it can be rewritten)
        self._pending: list[tuple[str, int | None]] = []  # (tool, its line number when live)
        self._reading = False  # a progress line is on the screen, the cursor at its end
        self._fold_failed: str | None = None  # why this turn's compaction folded nothing
        self._last: dict[Stream, str] = {}  # the last character streamed on each stream

    def _escaped(self, to: Stream, text: str) -> str:
        """Streamed text from the model, escaped (escape.streamed) knowing what it follows."""
        where = self._physical(to)
        shown = streamed(text, self._last.get(where, ""))
        self._last[where] = text[-1:]
        return shown

    def _physical(self, to: Stream) -> Stream:
        return to if self._split else Stream.ANSWER

    def _start(self, to: Stream, run: _Run) -> list[Piece]:
        """The newline that ends another run on the same stream before `run` (NONE: a line)."""
        where = self._physical(to)
        before = self._runs[where]
        self._runs[where] = run
        if before is _Run.NONE or before is run:
            return []
        return [Piece(to, "\n")]

    def _line(self, to: Stream, text: str) -> list[Piece]:
        if self._physical(to) is self._physical(Stream.EVENTS):
            width = self._width() if self._live else None
            shown = rows(text, width) if to is Stream.EVENTS else None
            if shown is None:  # the answer's own text, or a width unknown: rows not countable
                self._pending = [(name, None) for name, _ in self._pending]
                shown = [text]
            text = "\n".join(shown)
            self._lines += len(shown)
            self._one_row = len(shown) == 1
        return [*self._start(to, _Run.NONE), Piece(to, text + "\n")]

    def _run_started(self, to: Stream) -> None:
        """A streamed run on `to`'s stream: lines above can no longer be counted."""
        if self._physical(to) is self._physical(Stream.EVENTS):
            self._pending = [(name, None) for name, _ in self._pending]

    def _tool_started(self, event: ToolCallStartedEvent) -> list[Piece]:
        if not self._live:
            self._pending.append((event.name, None))
            return []
        pieces = self._line(Stream.EVENTS, status_line(event) or "")
        self._pending.append((event.name, self._lines if self._one_row else None))
        return pieces

    def _tool_done(self, event: ToolResultEvent) -> list[Piece]:
        text = status_line(event) or ""
        i = next((i for i, (name, _) in enumerate(self._pending) if name == event.name), None)
        at = self._pending.pop(i)[1] if i is not None else None
        if (
            at is None
            or self._runs[self._physical(Stream.EVENTS)] is not _Run.NONE
            or rows(text, self._width()) != [text]
        ):
            return self._line(Stream.EVENTS, text)
        return [Piece(Stream.EVENTS, rewrite_above(self._lines - at + 1, text))]

    def _live_line(self, text: str) -> list[Piece]:
        """A line rewritten in place as it changes, until what comes next clears it (issue 30
        item 5: the prompt's reading, the summary's size); on a terminal only."""
        if not self._live or self._runs[self._physical(Stream.EVENTS)] is not _Run.NONE:
            return []
        self._reading = True
        return [Piece(Stream.EVENTS, f"{CLEAR_LINE}{text}")]

    def _cleared(self) -> list[Piece]:
        """The progress line taken away, before anything else is written."""
        if not self._reading:
            return []
        self._reading = False
        return [Piece(Stream.EVENTS, CLEAR_LINE)]

    def event(self, event: TurnEvent) -> list[Piece]:
        """The pieces for one turn_event."""
        if isinstance(event, ProgressEvent):
            return self._live_line(
                f"[reading the prompt: {event.processed} of {event.total} tokens]"
            )
        if isinstance(event, CompactedEvent) and event.error:
            self._fold_failed = event.error
        if isinstance(event, CompactingEvent) and status_line(event) is None:
            return self._live_line(f"[compacting: the summary so far: {event.written} tokens]")
        pieces = self._event(event)
        return [*self._cleared(), *pieces] if pieces else pieces

    def _event(self, event: TurnEvent) -> list[Piece]:
        if isinstance(event, AnswerPartEvent):
            self._head.append(event.text)  # shown with the turn_done it belongs to
            return []
        if isinstance(event, ContentEvent):
            if not self._stream_content or not event.text:
                return []
            self._streamed = True
            self._run_started(Stream.ANSWER)
            start = self._start(Stream.ANSWER, _Run.CONTENT)
            return [*start, Piece(Stream.ANSWER, self._escaped(Stream.ANSWER, event.text))]
        if isinstance(event, ReasoningEvent):
            if not event.text:
                return []
            shown = self._escaped(Stream.EVENTS, event.text)
            if self._dim:
                text = f"{DIM}{shown}{RESET}"
            elif self._runs[self._physical(Stream.EVENTS)] is not _Run.REASONING:
                text = REASONING_MARK + shown  # no colour: marked where it begins (issue 39.7)
            else:
                text = shown
            self._run_started(Stream.EVENTS)
            return [*self._start(Stream.EVENTS, _Run.REASONING), Piece(Stream.EVENTS, text)]
        if isinstance(event, ToolCallStartedEvent):
            return self._tool_started(event)
        if isinstance(event, ToolResultEvent):
            return self._tool_done(event)
        if isinstance(event, ApprovalNeededEvent):
            # the question (approve.py) or the line saying it cannot be answered follows, written
            # outside this renderer: a running call's line can no longer be counted up to (the
            # trial saw its result overwrite a line of the approval)
            pieces = self._line(Stream.EVENTS, status_line(event) or "")
            self._pending = [(name, None) for name, _ in self._pending]
            return pieces
        line = status_line(event)
        return [] if line is None else self._line(Stream.EVENTS, line)

    def done(self, done: TurnDone) -> list[Piece]:
        """The pieces that end a turn that succeeded: the answer when it was not streamed, and
        every open line closed, so the next prompt or turn starts in column 0."""
        pieces: list[Piece] = self._cleared()
        content = "".join(self._head) + done.content if done.content is not None else None
        if not self._streamed:
            if content:
                shown = streamed(content.rstrip("\n"))
                pieces += self._line(Stream.ANSWER, shown)
            else:
                pieces += self._line(Stream.EVENTS, "[no answer: the reply had no content]")
        return pieces + self.close()

    def error(self, error: WireError) -> list[Piece]:
        """The pieces for a turn that ended in an `error` frame: open lines closed, then the
        error as one line on ERRORS. A turn the owner stopped is a status line instead."""
        if error.code is ErrorCode.STOPPED:
            return [
                *self.close(),
                *self._line(Stream.EVENTS, "[stopped: the answer was cancelled]"),
            ]
        failed, self._fold_failed = self._fold_failed, None
        if (
            error.code is ErrorCode.SESSION_FULL
            and error.message == f"nothing was folded: {failed}"
        ):
            # `/compact` that folded nothing: `[compaction failed: ...]` said why; the session is
            # not full, and goes on as it was (the trial read "error session_full" as a fault)
            return [*self.close(), *self._line(Stream.EVENTS, NOTHING_FOLDED)]
        return [*self.close(), Piece(Stream.ERRORS, error_line(error) + "\n")]

    def close(self) -> list[Piece]:
        """Newlines for every stream left in the middle of a line; afterwards, all are in
        column 0. Also for a turn cut short, before the shell reports why."""
        pieces: list[Piece] = self._cleared()
        for where in (Stream.ANSWER, Stream.EVENTS):
            if self._runs[where] is not _Run.NONE:
                pieces.append(Piece(where, "\n"))
                self._runs[where] = _Run.NONE
        for name, at in self._pending:  # no result came: its line says so
            line = f"[tool {one_line(name)}: no result]"
            if at is None or rows(line, self._width()) != [line]:
                pieces += self._line(Stream.EVENTS, line)
            else:
                text = rewrite_above(self._lines - at + 1, line)
                pieces.append(Piece(Stream.EVENTS, text))
        self._pending, self._lines = [], 0
        self._streamed = False
        self._head = []
        return pieces
