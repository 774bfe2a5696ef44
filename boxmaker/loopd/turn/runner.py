"""Runs one turn: the `turn.loop` core against the client, the tool port and the session's log.

    outcome = run_turn(log, "What time is it?", client=client, port=LoopdClock(),
                       config=config.loop, on_event=print)

`run_turn` carries out each action of the core in order:

- `Complete`: `client.chat_with_retry`; each ChatEvent the channel knows is passed to `on_event`
  as it arrives (the streamed tool-call pieces are not: the channel hears of a call once it is
  whole, as `tool_call_started`). An InferError goes back to the core, which ends the turn.
- `RunTools`: the port's calls (`recall` is answered beside the port, from the log's files:
  `turn.recall`), each on its own daemon thread so that one that hangs can be left behind: with
  `[loop] parallel_tools` all at once, else one after another. Each call has `tool_timeout_ms`;
  one that raises or has not answered by then becomes a `ToolFailure` and the others are not
  affected. The outcomes go back in call order, whatever order they finish in. A call left
  behind keeps its thread until the port answers; its answer is dropped.
- `Append`: `log.append`, durable before it returns, so before the event that reports it.
- `Emit`: `on_event`.
- `Compact` (issue 21, only with a `compactor`): `compactor.run`, the summary, the epoch switch
  and the pre-warm (`turn.compactor`).

- Stopping (issue 30, `stop`): the owner's `cancel` is seen at the next event of a completion
  (a token, a progress event, a slot poll) or before the next completion. The completion's
  connection is closed (which cancels the generation at the server), nothing of it is recorded
  but a `Stopped` record with the text streamed so far, and the turn ends `error{stopped}`. Tool
  calls in flight are withdrawn at brokerd by the worker (issue 38.1: a held ask denied, a
  command killed, as at the tool timeout) and their results, brokerd's account, are recorded
  first, so the log stays whole.

A failed append (the disk) raises the store's SessionError (AppendFailed) out of `run_turn`: the
store has cut the log back to its last acknowledged line, and the turn cannot go on without it.
`loopd turn` reports it as `error{internal}` with the store's message.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from boxmaker.loopd.config import LoopConfig
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.types import ChatEvent, ChatRequest, Completion
from boxmaker.loopd.tools.port import ToolPort, utc_now
from boxmaker.loopd.tools.registry import Registry, local_registry
from boxmaker.loopd.turn.compact import Compact, Failed, Room
from boxmaker.loopd.turn.compactor import Compactor
from boxmaker.loopd.turn.limits import LoopLimits
from boxmaker.loopd.turn.loop import (
    Append,
    Complete,
    Done,
    Emit,
    RunTools,
    ToolFailure,
    ToolOutcome,
    TurnLoop,
)
from boxmaker.loopd.turn.recall import WithRecall
from boxmaker.proto import (
    EVENT_TYPES,
    ContentEvent,
    ErrorCode,
    Stopped,
    ToolRequest,
    ToolResponse,
    TurnDone,
    TurnEvent,
    TurnUsage,
    WireError,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session import epoch_files
from boxmaker.session.baseline import Baseline, budget_text

_TURN_EVENTS = tuple(EVENT_TYPES.values())


class SessionLogLike(Protocol):
    """What a turn needs of an open session log (`session.store.SessionLog`)."""

    @property
    def baseline(self) -> Baseline: ...

    @property
    def records(self) -> Sequence[LogRecord]: ...

    def append(self, record: LogRecord) -> None: ...


class ChatClient(Protocol):
    """What a turn needs of `llama.client.Client`."""

    def chat_with_retry(
        self, req: ChatRequest, on_event: Callable[[ChatEvent], None]
    ) -> Completion: ...


OnEvent = Callable[[TurnEvent], None]


@dataclass(frozen=True, slots=True)
class MessageFit:
    """What a turn's message is measured against before it is appended (issue 29.3): the room
    a turn may fill (`compact.Room`: the slot's context and `[compact] at`), and the server's
    tokenizer."""

    room: Room
    count: Callable[[str], int]  # the server's token count of a text


# A message under this share of the room, in bytes, is never counted: a token is at least a
# byte, so it fits, and most turns cost no /tokenize call.
CHECK_SHARE = 8
_baseline_tokens: dict[str, int] = {}  # by baseline hash: an epoch's baseline is fixed


def message_fit(baseline: Baseline, content: str, fit: MessageFit) -> int | WireError | None:
    """The message's tokens when it is large enough to count, a WireError when it cannot fit a
    turn even alone (beside the system prompt and tools), or None (small: not counted)."""
    if len(content.encode("utf-8", "surrogatepass")) * CHECK_SHARE < fit.room.limit:
        return None
    try:
        tokens = fit.count(content)
        base = _baseline_tokens.get(baseline.hash)
        if base is None:
            base = _baseline_tokens[baseline.hash] = fit.count(budget_text(baseline))
    except InferError:
        return None  # it cannot be counted now: the server's answer decides, as before
    room = fit.room.left(base)
    if tokens <= room:
        return tokens
    at, n_ctx = fit.room.at, fit.room.n_ctx
    return WireError(
        ErrorCode.BAD_REQUEST,
        f"this message is {tokens:,} tokens (by the server's tokenizer), and at most {room:,} "
        f"fit in a turn: [compact] at ({at:.0%}) of the slot's {n_ctx:,}-token context, "
        f"less the system prompt and tools ({base:,}). Nothing was recorded; shorten it or send "
        "it in parts",
    )


class _StopAsked(Exception):
    """Raised out of a completion's event callback to close its connection (issue 30)."""


def _never() -> bool:
    return False


STOPPED_MESSAGE = (
    "stopped: the answer was cancelled at the server; the log keeps a `stopped` record, and the "
    "next message goes on from here"
)


def _drop(_event: TurnEvent) -> None:
    pass


def run_turn(
    log: SessionLogLike,
    content: str,
    *,
    client: ChatClient,
    port: ToolPort,
    config: LoopConfig,
    thinking: bool = True,
    on_event: OnEvent = _drop,
    registry: Registry | None = None,
    clock: Callable[[], str] = utc_now,
    compactor: Compactor | None = None,
    fit: MessageFit | None = None,
    stop: Callable[[], bool] = _never,
    client_ref: str | None = None,
) -> TurnDone | WireError:
    """Runs one turn of the session whose log is open in `log`.

    Args:
        log: the session's open log (its lock held).
        content: the user's message.
        client: the inference client.
        port: the tool port.
        config: the [loop] section (limits, parallel_tools, tool_timeout_ms).
        thinking: False asks for no reasoning in this turn.
        on_event: gets every event of the turn, in order, from this thread.
        registry: the tools the port runs; clock alone by default (`local_registry`).
        clock: the time for each record.
        compactor: folds the session into a new epoch when it fills; None never does.
        fit: measures a large message first: one that cannot fit even alone is refused before
            anything is appended; one that fits alone but not beside the history is folded
            for first (issue 29.3). None: not measured.
        stop: true once the owner asked to stop the turn (read from any thread's write).
        client_ref: the turn frame's, written into the User record (M4 section 6); the caller
            has checked that the log does not hold it yet (`turn.recorded`).

    Returns:
        TurnDone, or the WireError the turn ended with (session_full, turn_limit, inference,
        stopped).

    Raises:
        SessionError: an append failed; nothing partial was kept (the store's message says so).
    """
    registry = registry or local_registry()
    _warn_refused(registry)
    tokens = None if fit is None else message_fit(log.baseline, content, fit)
    if isinstance(tokens, WireError):
        return tokens
    core = TurnLoop(
        baseline=log.baseline,
        records=log.records,
        content=content,
        thinking=thinking,
        registry=registry,
        limits=LoopLimits.from_config(config),
        clock=clock,
        compact=None if compactor is None else compactor.settings,
        content_tokens=tokens,
        client_ref=client_ref,
    )

    shown: list[str] = []  # this completion's content, as streamed: what a stop records

    def forward(event: ChatEvent) -> None:
        if stop():
            raise _StopAsked
        if isinstance(event, ContentEvent):
            shown.append(event.text)
        if isinstance(event, _TURN_EVENTS):
            on_event(event)

    def stopped() -> WireError:
        log.append(Stopped(clock(), "".join(shown)))
        return WireError(ErrorCode.STOPPED, STOPPED_MESSAGE)

    timeout_s = config.tool_timeout_ms / 1000
    port = WithRecall(port, log)
    action = core.start()
    while True:
        result: object = None
        if isinstance(action, Complete):
            shown.clear()
            try:
                if stop():
                    raise _StopAsked
                result = client.chat_with_retry(action.request, forward)
            except InferError as err:
                result = err
            except _StopAsked:
                return stopped()
        elif isinstance(action, RunTools):
            result = run_tools(port, action.requests, timeout_s, parallel=config.parallel_tools)
        elif isinstance(action, Append):
            log.append(action.record)
        elif isinstance(action, Emit):
            on_event(action.event)
        elif isinstance(action, Compact):
            assert compactor is not None  # the core asks only when it has the settings
            result = compactor.run(cast(epoch_files.SessionLog, log), action, on_event)
        elif isinstance(action, Done):
            return action.outcome
        action = core.send(result)


_warned: set[str] = set()  # each refused tool once per process, not once per turn


def _warn_refused(registry: Registry) -> None:
    for why in registry.refused:
        if why not in _warned:
            _warned.add(why)
            sys.stderr.write(f"loopd: warning: the tool list: {why}\n")
            sys.stderr.flush()


def run_compaction(
    log: SessionLogLike, compactor: Compactor | None, on_event: OnEvent = _drop
) -> TurnDone | WireError:
    """`/compact`: folds the session's epoch now, whatever its size and past attempts. The
    final frame is `turn_done` (its content says which epoch began; its usage is the summary's)
    or `error{session_full}` saying why nothing was folded."""
    if compactor is None:
        return WireError(ErrorCode.BAD_REQUEST, "compaction is off ([compact] enabled = false)")
    got = compactor.run(cast(epoch_files.SessionLog, log), Compact("asked"), on_event)
    if isinstance(got, Failed):
        return WireError(ErrorCode.SESSION_FULL, f"nothing was folded: {got.reason}")
    end = got.ended
    return TurnDone(
        f"compacted into epoch {end.epoch + 1}",
        TurnUsage(end.cache_n, end.prompt_n, end.predicted_n, 0, False),
    )


# ---- the port's calls ---------------------------------------------------------------------------


class _Call:
    """One port call on a daemon thread; `outcome` is set once, by whichever side comes first."""

    def __init__(self, port: ToolPort, request: ToolRequest) -> None:
        self.request = request
        self._port = port
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._outcome: ToolOutcome | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"tool-{request.call}-{request.tool}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _settle(self, outcome: ToolOutcome) -> None:
        with self._lock:
            if self._outcome is None:
                self._outcome = outcome
                self._done.set()

    def _run(self) -> None:
        try:
            response = self._port.call(self.request)
        except Exception as exc:  # tool failures are data: any exception becomes a result
            self._settle(ToolFailure(f"it raised {type(exc).__name__}: {exc}"))
            return
        if isinstance(response, ToolResponse):
            self._settle(response)
        else:
            self._settle(ToolFailure(f"it answered {type(response).__name__}, not a response"))

    def wait(self, deadline: float, timeout_s: float) -> ToolOutcome:
        self._done.wait(max(0.0, deadline - time.monotonic()))
        ms = round(timeout_s * 1000)
        self._settle(ToolFailure(f"it did not answer within {ms} ms (tool_timeout_ms)"))
        assert self._outcome is not None
        return self._outcome


def run_tools(
    port: ToolPort, requests: Sequence[ToolRequest], timeout_s: float, *, parallel: bool
) -> tuple[ToolOutcome, ...]:
    """Runs the calls, each bounded by `timeout_s`; returns their outcomes in call order."""
    calls = [_Call(port, r) for r in requests]
    if parallel and len(calls) > 1:
        for call in calls:
            call.start()
        started = time.monotonic()  # every call started within a moment of this
        return tuple(call.wait(started + timeout_s, timeout_s) for call in calls)
    outcomes = []
    for call in calls:
        call.start()
        outcomes.append(call.wait(time.monotonic() + timeout_s, timeout_s))
    return tuple(outcomes)
