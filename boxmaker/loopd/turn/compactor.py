"""Runs a compaction (issue 21): `turn.compact`'s summary attempt against the client, then the
epoch switch (`session.epoch_files.switch`) and the pre-warm.

    compactor = Compactor.from_config(config, client)
    outcome = run_turn(log, text, ..., compactor=compactor)

One `Compactor` serves a worker (or one `loopd turn`). The automatic attempts of an epoch are
counted from its log (`compact.attempt_refused`, issue 29.5): at most `[compact] max_attempts`
that asked the model, then one more each time the context has grown enough, so no answer of the
model can make it loop, and a restart neither forgets nor resets the count. The summary's own
events are not forwarded (its text is not the turn's answer); the channel hears `compacting` at
each step instead (issue 30.5: summarising, then the count of the summary's tokens at most every
SUMMARY_EVERY_S, switching, pre-warming) with the waits and the prompt's `progress` of both
requests, and `compacted` at the end, so no step is a silent wait.

The pre-warm sends the new epoch's prefix (its baseline and kept turns, the generation prompt,
one token to generate) so the owner's next message is read alone; its counts are in the
`compacted` event (`after` is the prefix's size as the server counted it). An error there is
only a cold cache for the next turn, never a failed compaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from boxmaker.loopd.config import CompactConfig, Config
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.types import ChatEvent, ChatRequest, Completion
from boxmaker.loopd.tools.port import utc_now
from boxmaker.loopd.turn.compact import (
    Compact,
    Failed,
    Folded,
    Room,
    Settings,
    Switched,
    attempt_refused,
    summarise,
    used,
)
from boxmaker.proto import (
    CompactedEvent,
    CompactingEvent,
    CompactStep,
    ContentEvent,
    ProgressEvent,
    ReasoningEvent,
    RetryingEvent,
    TurnEvent,
    Usage,
    WaitingEvent,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session import epoch_files
from boxmaker.session.baseline import Baseline, assemble_baseline
from boxmaker.session.errors import BaselineError, SwitchRefused
from boxmaker.session.replay import request_messages

SUMMARY_EVERY_S = 0.5  # how often the summary's growing size is told while it is written


class Client(Protocol):
    def chat_with_retry(
        self,
        req: ChatRequest,
        on_event: Callable[[ChatEvent], None],
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> Completion: ...


def _waits(on_event: Callable[[TurnEvent], None]) -> Callable[[ChatEvent], None]:
    """A request's waits and its prompt's reading, passed on to the channel (issue 30.5)."""

    def passed(event: ChatEvent) -> None:
        if isinstance(event, ProgressEvent | WaitingEvent | RetryingEvent):
            on_event(event)

    return passed


@dataclass
class Compactor:
    client: Client
    config: CompactConfig
    n_ctx: int
    system: Path  # [baseline] system
    home: Path
    max_tokens: int  # [inference] max_tokens
    clock: Callable[[], str] = utc_now
    monotonic: Callable[[], float] = time.monotonic
    prewarms: list[Completion] = field(default_factory=list)  # the last one, for tests and bench

    @classmethod
    def from_config(cls, config: Config, client: Client) -> Compactor | None:
        """The session's compactor, or None with `[compact] enabled = false`."""
        if not config.compact.enabled:
            return None
        return cls(
            client,
            config.compact,
            config.expect.n_ctx,
            config.baseline.system,
            config.paths.home,
            config.inference.max_tokens,
        )

    @property
    def settings(self) -> Settings:
        c = self.config
        summary = min(c.summary_tokens, self.max_tokens)
        room = Room(self.n_ctx, c.at)
        return Settings(room, c.keep_turns, c.min_cut, c.owner_chars, summary)

    def run(
        self, log: epoch_files.SessionLog, action: Compact, on_event: Callable[[TurnEvent], None]
    ) -> Switched | Failed:
        """One compaction of `log`'s epoch; the channel hears `compacting` and `compacted`.

        Raises:
            SessionError: the switch failed after its commit point (the log is closed then, so
                the worker lets go and the next open rolls it forward), or an append failed.
        """
        started = self.monotonic()
        records = tuple(log.records)
        # `/compact` is the owner's: neither bounded by max_attempts nor counted in it; and a
        # context-full answer gets its one fold whatever came before.
        if action.reason == "threshold":
            why = attempt_refused(log.baseline, records, self.settings, self.config.max_attempts)
            if why is not None:  # spent: said once, when the last attempt failed
                return Failed(why)
        tokens = used(_last_usage(records))

        def step(name: CompactStep, written: int = 0) -> None:
            on_event(CompactingEvent(action.reason, tokens, name, written))

        step(CompactStep.SUMMARISING)
        try:
            system_now = assemble_baseline(self.system, self.home, ()).system
        except BaselineError as e:
            return self._failed(log, started, on_event, str(e))
        gen = summarise(
            baseline=log.baseline,
            records=records,
            slot=_slot(records),
            epoch=log.epoch,
            system_now=system_now,
            settings=self.settings,
            now=self.clock(),
            upto=action.upto,
        )
        extra = {"max_tokens": self.settings.summary_tokens}
        passed = _waits(on_event)
        written = 0  # the summary's streamed pieces: a token each from llama-server
        told = self.monotonic()

        def summary_events(event: ChatEvent) -> None:
            nonlocal written, told
            passed(event)
            if isinstance(event, ContentEvent | ReasoningEvent) and event.text:
                written += 1
                if self.monotonic() - told >= SUMMARY_EVERY_S:
                    told = self.monotonic()
                    step(CompactStep.SUMMARISING, written)

        try:
            req = next(gen)
            while True:
                try:
                    got: Completion | InferError = self.client.chat_with_retry(
                        req, summary_events, extra=extra
                    )
                except InferError as err:
                    got = err
                req = gen.send(got)
        except StopIteration as stop:
            outcome: Folded | Failed = stop.value
        if isinstance(outcome, Failed):
            return self._failed(log, started, on_event, outcome.reason)
        step(CompactStep.SWITCHING, written)
        try:
            epoch_files.switch(log, outcome.end, outcome.baseline)
        except SwitchRefused as e:  # nothing committed: the turn goes on in epoch n
            return self._failed(log, started, on_event, str(e))
        if self.config.prewarm:
            step(CompactStep.PREWARMING, written)
        after = self.prewarm(log.baseline, log.records, _slot(records), passed)
        ms = round((self.monotonic() - started) * 1000)
        on_event(CompactedEvent(log.epoch, outcome.before, after, ms, ""))
        return Switched(log.baseline, tuple(log.records), outcome.end)

    def prewarm(
        self,
        baseline: Baseline,
        records: Sequence[LogRecord],
        slot: int,
        on_event: Callable[[ChatEvent], None] | None = None,
    ) -> int:
        """Sends the epoch's prefix (its waits and progress to `on_event`); returns its size in
        tokens as the server counted it (0 when it was off or failed)."""
        if not self.config.prewarm:
            return 0
        req = ChatRequest(slot, tuple(request_messages(baseline, records)), baseline.tools)
        try:
            got = self.client.chat_with_retry(req, on_event or _ignore, extra={"max_tokens": 1})
        except InferError:
            return 0
        self.prewarms.append(got)
        del self.prewarms[:-1]
        return got.timings.cache_n + got.timings.prompt_n

    def _failed(
        self,
        log: epoch_files.SessionLog,
        started: float,
        on_event: Callable[[TurnEvent], None],
        reason: str,
    ) -> Failed:
        ms = round((self.monotonic() - started) * 1000)
        before = used(_last_usage(log.records))
        on_event(CompactedEvent(log.epoch, before, before, ms, reason))
        return Failed(reason)


def _ignore(_event: ChatEvent) -> None:
    pass


def _last_usage(records: Sequence[LogRecord]) -> Usage | None:
    return next((r for r in reversed(records) if isinstance(r, Usage)), None)


def _slot(records: Sequence[LogRecord]) -> int:
    start = records[0]
    return getattr(start, "slot", 0)  # epoch n's slot: the seam for a new epoch's slot choice
