"""The llama client: `chat`, `chat_with_retry`, and the info calls (M2a brief, section 3).

    client = Client(config.inference)
    completion = client.chat_with_retry(request, on_event)

`chat` is one attempt: the slot gate, then `llama.chat.run_chat`. `chat_with_retry` repeats it
as `llama.retry` says, going back through the gate each time (the gate is not held while it
waits) and emitting `Retrying{attempt, after_ms, error}` before each wait, where `attempt` is the
number of the attempt about to be made (2 for the first retry). The request bytes are built once,
so every attempt sends the same bytes.

The clock, the sleep and the random source are injected so the retry schedule and its 5-minute
cap can be tested without waiting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from boxmaker.loopd.config import InferenceConfig
from boxmaker.loopd.llama.chat import run_chat
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.gate import Gate, SlotGate
from boxmaker.loopd.llama.info import (
    TOKENIZE_PATH,
    Props,
    SlotState,
    parse_props,
    parse_slots,
    parse_tokenize,
    props_target,
    slots_target,
    tokenize_body,
)
from boxmaker.loopd.llama.request import chat_body
from boxmaker.loopd.llama.retry import RetryPolicy, Rng
from boxmaker.loopd.llama.transport import Clock, Response, short_call
from boxmaker.loopd.llama.types import ChatRequest, Completion, OnEvent
from boxmaker.proto import RetryingEvent


class Client:
    def __init__(
        self,
        config: InferenceConfig,
        *,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: Rng | None = None,
        gate: Gate | None = None,
    ) -> None:
        """Args:
        config: the [inference] section.
        clock: a monotonic clock in seconds.
        sleep: waits the given seconds (between retries).
        rng: the jitter source (a random.Random).
        gate: any Gate, shared with other clients; by default this client's own SlotGate.
        """
        self.config = config
        self.gate: Gate = gate if gate is not None else SlotGate(config.queue_length)
        self.policy = RetryPolicy.from_config(config)
        self._clock = clock
        self._sleep = sleep
        self._rng: Rng = rng if rng is not None else random.Random()

    def request_body(self, req: ChatRequest, extra: Mapping[str, Any] | None = None) -> bytes:
        """The exact bytes `chat` sends for `req`.

        Raises:
            ValueError: the slot is not one of [inference] slots, or `extra` is refused.
        """
        if req.slot not in self.config.slots:
            allowed = ", ".join(map(str, self.config.slots))
            raise ValueError(f"slot {req.slot} is not one of [inference] slots ({allowed})")
        return chat_body(req, self.config, extra)

    def chat(
        self, req: ChatRequest, on_event: OnEvent, *, extra: Mapping[str, Any] | None = None
    ) -> Completion:
        """One attempt: wait for the slot, send, read the Completion.

        Args:
            req: what to ask.
            on_event: called with each ChatEvent in order, from the calling thread.
            extra: more top-level request fields (see `llama.request.chat_body`).

        Raises:
            InferError: any of the family; Busy when the slot's line is full.
        """
        return self._attempt(req.slot, self.request_body(req, extra), on_event)

    def chat_with_retry(
        self, req: ChatRequest, on_event: OnEvent, *, extra: Mapping[str, Any] | None = None
    ) -> Completion:
        """Like `chat`, retrying what `llama.retry` says is retryable.

        Raises:
            InferError: the first error that is not retried, or the last one.
        """
        body = self.request_body(req, extra)
        started = self._clock()
        failed = 0
        while True:
            try:
                return self._attempt(req.slot, body, on_event)
            except InferError as err:
                failed += 1
                elapsed_ms = (self._clock() - started) * 1000
                delay = self.policy.next_delay(failed, elapsed_ms, err, self._rng)
                if delay is None:
                    raise
                on_event(RetryingEvent(attempt=failed + 1, after_ms=delay, error=err.describe()))
                self._sleep(delay / 1000)

    def _attempt(self, slot: int, body: bytes, on_event: OnEvent) -> Completion:
        with self.gate.hold(slot, on_event):
            return run_chat(self.config, slot, body, on_event, clock=self._clock)

    # -- the info calls --
    def props(self) -> Props:
        """GET /props?model=<id>."""
        return parse_props(self._call("GET", props_target(self.config.model), None).body)

    def slots(self) -> tuple[SlotState, ...]:
        """GET /slots?model=<id>."""
        return parse_slots(self._call("GET", slots_target(self.config.model), None).body)

    def tokenize(self, text: str) -> tuple[int, ...]:
        """POST /tokenize {"model", "content"}."""
        body = tokenize_body(self.config.model, text)
        return parse_tokenize(self._call("POST", TOKENIZE_PATH, body).body)

    def _call(self, method: str, target: str, body: bytes | None) -> Response:
        return short_call(self.config, method, target, body, self._clock)
