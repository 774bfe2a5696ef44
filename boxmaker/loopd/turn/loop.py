"""One turn of a session as a sans-IO core (M2b brief section 3). [core]

`TurnLoop` decides and its runner (`turn.runner`) acts. `start()` returns the first action; after
carrying an action out, the runner passes its result to `send(result)` and gets the next one:

| Action               | The runner                                   | Sends back                 |
|----------------------|----------------------------------------------|----------------------------|
| `Complete(request)`  | `chat_with_retry`, forwarding the ChatEvents | the `Completion`, or error |
| `RunTools(requests)` | the port, each call bounded by a timeout     | a `ToolOutcome` per call   |
| `Append(record)`     | appends it durably to the session's log      | None                       |
| `Emit(event)`        | hands the event to the channel               | None                       |
| `Done(outcome)`      | returns `TurnDone` or the `WireError`        | (the turn is over)         |

The turn:
1. Calls left without a result by an interrupted turn get one saying so (the log stays a
   well-formed conversation), then `User` is appended.
2. The request is the baseline's system message, `replay.messages` of the whole log so far, the
   baseline's tools, and the turn's `thinking` switch (the generation prompt only).
3. `Assistant` and `Usage` are appended; `CacheLoss` too when the completion lost the cache the
   session's previous completion (in any turn) left.
4. No tool calls: done, with the content and the last Usage; unless `[loop] nudge` is on and
   `turn.nudge` finds the answer wants one more try (advice, an unsupported claim, unread): then
   (at most twice a turn, a round each) its note is appended as a `user` record and step 2
   again. The note is an ordinary message of the log, so replay and the cache see it like any.
5. Otherwise the batch is judged by `turn.limits`, numbered from the session's call counter in
   call order, and resolved by `tools.registry` (unknown or invalid calls and `find_tool` are
   answered here, and with the nudge on so are `turn.hold`'s; the port sees only valid calls of
   its tools). The port's calls go out in one `RunTools`, concurrently or not as the runner is
   set; the results come back in call order, are capped, appended as `ToolResult`s in call order
   and reported. Then step 2 again, unless the batch ended the turn (`turn_limit`).

An HTTP 400 ends the turn with `session_full` and nothing appended for that request; any other
inference error ends it with `inference`. What was appended stays, and the session stays usable.

With `compact` settings (issue 21, `turn.compact`), a `Compact` action folds the epoch when the
last completion filled the slot past `[compact] at`: before the user message and between two
iterations (every call has its result there; it is not an iteration). A 400 gets one compaction
and one retry of the request; `session_full` only when that cannot make room.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from boxmaker.loopd.llama.errors import HttpStatus, InferError
from boxmaker.loopd.llama.types import ChatRequest, Completion
from boxmaker.loopd.tools.registry import Answer, Registry, Resolution, resolve
from boxmaker.loopd.turn import compact as comp
from boxmaker.loopd.turn.hold import after_repeat, hold
from boxmaker.loopd.turn.limits import LoopLimits, TurnLimiter, Verdict, cap_result, text_problem
from boxmaker.loopd.turn.nudge import is_nudge, nudge
from boxmaker.loopd.turn.outcome import done_before, outcome_of
from boxmaker.loopd.turn.records import (
    cache_loss,
    cache_loss_event,
    completion_records,
    turn_usage,
)
from boxmaker.loopd.turn.stuck import stuck
from boxmaker.proto import (
    Assistant,
    ErrorCode,
    ResultClass,
    SessionStart,
    ToolCall,
    ToolCallStartedEvent,
    ToolRequest,
    ToolResponse,
    ToolResult,
    ToolResultEvent,
    TurnDone,
    TurnEvent,
    Usage,
    User,
    WireError,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session.baseline import Baseline
from boxmaker.session.replay import request_messages

# The status llama-server answers when the prompt does not fit the slot's context.
CONTEXT_FULL_STATUS = 400

INTERRUPTED_NOTE = (
    "not run: the turn that asked for this call was interrupted before its result was "
    "recorded (loopd stopped)."
)


# ---- actions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Complete:
    request: ChatRequest


@dataclass(frozen=True, slots=True)
class RunTools:
    """Port calls, numbered and in call order; the outcomes must come back in the same order."""

    requests: tuple[ToolRequest, ...]


@dataclass(frozen=True, slots=True)
class Append:
    record: LogRecord


@dataclass(frozen=True, slots=True)
class Emit:
    event: TurnEvent


@dataclass(frozen=True, slots=True)
class Done:
    outcome: TurnDone | WireError


Action = Complete | RunTools | Append | Emit | Done | comp.Compact


@dataclass(frozen=True, slots=True)
class ToolFailure:
    """A port call that gave no response: `reason` completes "the tool X failed: ..."."""

    reason: str


ToolOutcome = ToolResponse | ToolFailure


# ---- what the log says about the session --------------------------------------------------------


def next_call_number(records: Sequence[LogRecord]) -> int:
    """The session's call counter: one more than the highest ToolResult.call, or 0."""
    calls = [r.call for r in records if isinstance(r, ToolResult)]
    return max(calls) + 1 if calls else 0


def last_usage(records: Sequence[LogRecord]) -> Usage | None:
    return next((r for r in reversed(records) if isinstance(r, Usage)), None)


def unanswered_calls(records: Sequence[LogRecord]) -> tuple[ToolCall, ...]:
    """The calls of the log's last Assistant that no ToolResult after it answers."""
    for i in range(len(records) - 1, -1, -1):
        record = records[i]
        if isinstance(record, Assistant):
            answered = {r.tool_call_id for r in records[i + 1 :] if isinstance(r, ToolResult)}
            return tuple(c for c in record.tool_calls if c.id not in answered)
    return ()


def _full(err: InferError) -> bool:
    return isinstance(err, HttpStatus) and err.status == CONTEXT_FULL_STATUS


def error_outcome(err: InferError) -> WireError:
    if isinstance(err, HttpStatus) and err.status == CONTEXT_FULL_STATUS:
        return WireError(
            ErrorCode.SESSION_FULL,
            f"the conversation no longer fits the model's context (the server answered {err}); "
            "nothing was recorded for this request: start a new session",
        )
    return WireError(ErrorCode.INFERENCE, err.describe())


# ---- the turn ----------------------------------------------------------------------------------


class TurnLoop:
    """One turn. Use `start()` once, then `send(result)` after each action until `Done`."""

    def __init__(
        self,
        *,
        baseline: Baseline,
        records: Sequence[LogRecord],
        content: str,
        thinking: bool,
        registry: Registry,
        limits: LoopLimits,
        clock: Callable[[], str],
        compact: comp.Settings | None = None,
        content_tokens: int | None = None,
        client_ref: str | None = None,
    ) -> None:
        """Args:
        baseline: the session's baseline (its system text and tools).
        records: the session's log before this turn, `session_start` first.
        content: the user's message.
        thinking: False asks for no reasoning in this turn's completions.
        registry: the tools the port can run.
        limits: the [loop] limits.
        clock: the time for each record, as RFC 3339 text.
        compact: the [compact] settings; None never compacts.
        content_tokens: the message's tokens, when the runner counted them (a large one): a
            message that would take the slot past `[compact] at` beside the history is folded
            for before it is appended (issue 29.3).
        client_ref: the turn frame's client_ref, kept in the User record (M4 section 6).
        """
        if not records or not isinstance(records[0], SessionStart):
            raise ValueError("a session's log starts with its session_start record")
        self.baseline = baseline
        self.records: list[LogRecord] = list(records)
        self.slot = records[0].slot
        self.next_call = next_call_number(records)
        self._content = content
        self._thinking = thinking
        self._registry = registry
        self._limits = limits
        self._now = clock
        self._compact = compact
        self._content_tokens = content_tokens
        self._client_ref = client_ref
        self._compact_failure: str | None = None
        self._gen = self._turn()
        self._started = False

    def start(self) -> Action:
        if self._started:
            raise RuntimeError("start() is called once; then send()")
        self._started = True
        return next(self._gen)

    def send(self, result: object) -> Action:
        try:
            return self._gen.send(result)
        except StopIteration:
            raise RuntimeError("the turn is over: Done was its last action") from None

    # -- the steps --
    def _append(self, record: LogRecord) -> Generator[Action, object, None]:
        yield Append(record)
        self.records.append(record)

    def _compacted(self, reason: str, upto: int | None = None) -> Generator[Action, object, bool]:
        """Asks for a fold; True when the session moved to its next epoch."""
        got = yield comp.Compact(reason, upto)
        if isinstance(got, comp.Switched):
            self.baseline, self.records = got.baseline, list(got.records)
            return True
        if not isinstance(got, comp.Failed):
            raise TypeError(f"Compact takes Switched or Failed, got {got!r:.80}")
        self._compact_failure = got.reason
        return False

    def _due(self) -> bool:
        return self._compact is not None and comp.due(last_usage(self.records), self._compact)

    def _crowded(self) -> bool:
        """Whether the message beside what the slot holds passes `[compact] at`."""
        c, n = self._compact, self._content_tokens
        if c is None or n is None:
            return False
        return comp.due(last_usage(self.records), c, n)

    def _turn(self) -> Generator[Action, object, None]:
        for call in unanswered_calls(self.records):
            yield from self._append(self._note(call, INTERRUPTED_NOTE))
        if self._due() or self._crowded():
            yield from self._compacted("threshold")
        yield from self._append(User(self._now(), self._content, self._client_ref))
        limiter = TurnLimiter(self._limits)
        previous = last_usage(self.records)
        retried = False
        first = True
        while True:
            if not first and self._due() and (yield from self._compacted("threshold")):
                previous = last_usage(self.records)
            first = False
            request = ChatRequest(
                self.slot,
                tuple(request_messages(self.baseline, self.records)),
                self.baseline.tools,
                thinking=self._thinking,
            )
            got = yield Complete(request)
            if isinstance(got, InferError) and _full(got) and self._compact and not retried:
                retried = True  # one compaction and one retry, whatever happens
                turn_start = max(
                    i for i, r in enumerate(self.records) if type(r) is User and not is_nudge(r)
                )
                if (yield from self._compacted("context_full", turn_start)):
                    previous = last_usage(self.records)
                    continue
                why = comp.full_message(str(got), self._compact_failure)
                yield Done(WireError(ErrorCode.SESSION_FULL, why))
                return
            if isinstance(got, InferError):
                yield Done(error_outcome(got))
                return
            if not isinstance(got, Completion):
                raise TypeError(f"Complete takes a Completion or an InferError, got {got!r:.80}")
            assistant, usage = completion_records(got, self._now())
            yield from self._append(assistant)
            yield from self._append(usage)
            loss = cache_loss(previous, got, self._now())
            previous = usage
            if loss is not None:
                yield from self._append(loss)
                yield Emit(cache_loss_event(loss))
            if not got.tool_calls:
                note = nudge(self.records, got.content or "") if self._limits.nudge else None
                if note is not None and limiter.spend():
                    yield from self._append(User(self._now(), note))
                    continue
                yield Done(TurnDone(got.content, turn_usage(usage)))
                return
            ended = yield from self._batch(got.tool_calls, limiter)
            if ended is not None:
                yield Done(WireError(ErrorCode.TURN_LIMIT, ended + done_before(self.records)))
                return
            note = stuck(self.records) if self._limits.nudge else None  # no call ran: what next
            if note is not None and limiter.spend():
                yield from self._append(User(self._now(), note))

    def _batch(
        self, calls: tuple[ToolCall, ...], limiter: TurnLimiter
    ) -> Generator[Action, object, str | None]:
        """Runs one completion's calls; returns the turn_limit message if the batch ends it."""
        plan = limiter.plan(calls)
        first = self.next_call
        self.next_call += len(calls)  # numbered in call order before any runs
        plans: list[Resolution] = []
        for i, call in enumerate(calls):
            note = plan.note(i)
            if self._limits.nudge:  # turn.hold: a repeat's next step; a call answered unrun
                repeated = plan.verdicts[i] is Verdict.REPEATED
                note = after_repeat(self.records, call.name, call.arguments) if repeated else note
                note = note or hold(self.records, call.name, call.arguments)
            plans.append(
                resolve(call, self._registry)
                if note is None
                else Answer(call.name, note, error=True)
            )
        for p in plans:
            yield Emit(ToolCallStartedEvent(p.name))
        port = [
            (i, ToolRequest(first + i, p.tool, p.arguments))
            for i, p in enumerate(plans)
            if not isinstance(p, Answer)
        ]
        outcomes: dict[int, ToolOutcome] = {}
        if port:
            got = yield RunTools(tuple(req for _, req in port))
            if not isinstance(got, tuple | list) or len(got) != len(port):
                raise TypeError(f"RunTools takes one outcome per request, got {got!r:.80}")
            outcomes = {i: outcome for (i, _), outcome in zip(port, got, strict=True)}
        for i, (call, p) in enumerate(zip(calls, plans, strict=True)):
            record = self._result(first + i, call, p, outcomes.get(i))
            yield from self._append(record)
            said = outcome_of(p, outcomes.get(i), record.content)
            yield Emit(ToolResultEvent(p.name, record.class_, record.truncated, said))
        return plan.ends_turn

    def _note(self, call: ToolCall, content: str, number: int | None = None) -> ToolResult:
        """A ToolResult loopd writes itself (an error or find_tool's answer)."""
        if number is None:
            number = self.next_call
            self.next_call += 1
        capped, cut = cap_result(content, self._limits.tool_result_cap)
        return ToolResult(self._now(), number, call.id, capped, ResultClass.PUBLIC, False, cut)

    def _result(
        self, number: int, call: ToolCall, plan: Resolution, outcome: ToolOutcome | None
    ) -> ToolResult:
        if isinstance(plan, Answer):
            return self._note(call, plan.content, number)
        if isinstance(outcome, ToolFailure):
            return self._note(call, f"error: the tool {plan.tool} failed: {outcome.reason}", number)
        if not isinstance(outcome, ToolResponse):
            raise TypeError(f"a tool outcome is a ToolResponse or a ToolFailure, got {outcome!r}")
        if (problem := _response_problem(outcome)) is not None:
            why = f"error: the tool {plan.tool} answered something unusable: {problem}"
            return self._note(call, why, number)
        capped, cut = cap_result(outcome.content, self._limits.tool_result_cap)
        return ToolResult(
            self._now(),
            number,
            call.id,
            capped,
            outcome.class_,
            outcome.untrusted,
            outcome.truncated or cut,
        )


def _response_problem(response: ToolResponse) -> str | None:
    """Why a port's response cannot be recorded as it is, or None."""
    if not isinstance(response.content, str):
        return f"content is {type(response.content).__name__}, not text"
    if not isinstance(response.class_, ResultClass):
        return f"class is {response.class_!r}, not a ResultClass"
    if not isinstance(response.untrusted, bool) or not isinstance(response.truncated, bool):
        return "untrusted and truncated must be booleans"
    return text_problem(response.content)
