"""One chat request from send to Completion: the waits, liveness and the thinking cap.

This is the I/O shell of M2a brief section 4, steps 2 to 5 (the gate is the caller's). The
decisions are made by the cores: `waits.FirstByteWait` (how long to wait for the first byte),
`waits.ThinkingGuard` (the cap), `http`, `sse` and `assemble` (the bytes). What this module does:

1. Connect to infer.sock and send the request (`Connection: close`: one request, one connection).
2. Wait for the first byte with reads that time out every `poll_ms`. After each timeout, ask
   `/slots?model=<id>` on a second connection (at most `control_timeout_ms`), emit
   `Waiting{slot_busy}`, and let `FirstByteWait` decide: wait on, or WaitTimeout / LoadTimeout /
   Stalled.
3. From the first byte on, liveness (DECISIONS.md, "Liveness"): the response head must be
   complete within `liveness_ms` of its first byte, and then the stream must make progress at
   least every `liveness_ms`. Progress is a complete SSE event that moves the completion on (a
   prompt_progress event, a delta: `Assembler.progress`), never a comment, an empty chunk or part
   of a line, so a server that pings or drips bytes without producing anything is `Stalled`.
   There is no total deadline; what one completion may hold is capped instead (`assemble`).
4. An error status is `HttpStatus(status, body)` with at most 4 KiB of the body kept, read
   within `liveness_ms` of the head.
5. Each stream payload is folded; the reasoning count is checked after each. At `thinking_cap`,
   POST `reasoning_end` to `/v1/chat/completions/control` on a second connection, emit
   `ThinkingCapped`, read on. Reasoning `thinking_overrun` tokens past that, or a control call
   that does not answer `success: true`, is `ThinkingOverrun`.
6. The Completion once the stream is over (`[DONE]`, the end of the body, or the close) with a
   finish_reason; without one it is `StreamClosedEarly`.

The connection is closed on every way out, which is how generation is cancelled. No thread is
started: the /slots poll and the control call are made from this thread, between reads. The
injected clock is used only for the first-byte decisions, so a test may pass a clock that jumps;
the liveness deadlines are kept on `time.monotonic`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from boxmaker.loopd.config import InferenceConfig
from boxmaker.loopd.llama.assemble import Assembler, CompletionLimits
from boxmaker.loopd.llama.errors import (
    HTTP_BODY_CAP_BYTES,
    BadResponse,
    HttpStatus,
    InferError,
    Stalled,
    StreamClosedEarly,
    ThinkingOverrun,
)
from boxmaker.loopd.llama.http import (
    HeadParser,
    ResponseHead,
    TruncatedBody,
    body_decoder,
    build_request,
    content_type,
)
from boxmaker.loopd.llama.info import (
    CONTROL_PATH,
    control_body,
    parse_control,
    parse_slots,
    slots_target,
)
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.llama.sse import EventStream
from boxmaker.loopd.llama.transport import (
    Clock,
    Connection,
    Response,
    admitted,
    short_exchange,
)
from boxmaker.loopd.llama.types import ChatEvent, Completion, OnEvent
from boxmaker.loopd.llama.waits import FirstByteWait, SlotView, Thinking, ThinkingGuard, WaitLimits
from boxmaker.proto import NEED_DATA, ThinkingCappedEvent, WaitingEvent

_now = time.monotonic  # the liveness clock: real time, whatever clock the caller injects


def run_chat(
    config: InferenceConfig,
    slot: int,
    body: bytes,
    on_event: OnEvent,
    *,
    clock: Clock = time.monotonic,
) -> Completion:
    """Sends one chat-completions request body and reads it to its Completion.

    Args:
        config: the socket, the model id and every limit.
        slot: the slot the body names (for /slots and messages).
        body: the JSON body from `llama.request.chat_body`.
        on_event: called with each ChatEvent, in order, from this thread.
        clock: a monotonic clock in seconds.

    Raises:
        InferError: ConnectFailed, WaitTimeout, LoadTimeout, Stalled, StreamClosedEarly,
            ThinkingOverrun, HttpStatus or BadResponse, with a message that says what happened.
    """
    # A connection inferproxy refused over its accept budget (dropped unread, before any event)
    # is made again as a token comes back, for up to control_timeout_ms, the main request's
    # wait for infer.sock to accept (docs/decisions/proxy-budget.md).
    quiet = True  # no event yet: the caller has seen nothing of a try

    def note(event: ChatEvent) -> None:
        nonlocal quiet
        quiet = False
        on_event(event)

    return admitted(
        lambda: _Chat(config, slot, note, clock).run(body),
        config.refused_retry_ms,
        config.control_timeout_ms,
        retry=lambda: quiet,
    )


class _Chat:
    def __init__(self, config: InferenceConfig, slot: int, on_event: OnEvent, clock: Clock):
        self.cfg = config
        self.slot = slot
        self.on_event = on_event
        self.clock = clock
        self.liveness_s = config.liveness_ms / 1000

    def run(self, body: bytes) -> Completion:
        cfg = self.cfg
        conn = Connection.open(cfg.socket, cfg.control_timeout_ms / 1000)
        try:
            conn.send(build_request("POST", CHAT_PATH, body), self.liveness_s)
            head, rest = self._await_head(conn)
            if head.status != 200:
                raise self._http_error(conn, head, rest)
            if (kind := content_type(head)) != "text/event-stream":
                raise BadResponse(f"HTTP 200 but Content-Type {kind or 'none'!r}, not a stream")
            return self._stream(conn, head, rest)
        finally:
            conn.close()  # also what cancels a generation we gave up on

    # -- step 2: the first byte --
    def _await_head(self, conn: Connection) -> tuple[ResponseHead, bytes]:
        parser = HeadParser(self.cfg.max_header_bytes, self.cfg.max_interim_heads)
        wait = FirstByteWait(WaitLimits.from_config(self.cfg), self.slot, self.clock())
        deadline: float | None = None  # once a byte came: the head is due by then
        while True:
            if deadline is None:
                data = conn.recv(self.cfg.poll_ms / 1000)
            else:
                left = deadline - _now()
                data = conn.recv(left) if left > 0 else None
            if data is None:
                if deadline is not None:
                    raise Stalled(
                        f"the response head was not complete {self.cfg.liveness_ms} ms "
                        f"(liveness_ms) after its first byte ({parser.received} bytes came)"
                    )
                view, detail = self._poll_slots()
                self.on_event(WaitingEvent(slot_busy=view is SlotView.BUSY))
                if (err := wait.observe(self.clock(), view, detail)) is not None:
                    raise err
                continue
            if deadline is None:
                deadline = _now() + self.liveness_s
            parser.receive_data(data)  # b"": the close; next_head() says what it means
            if (head := parser.next_head()) is not NEED_DATA:
                assert isinstance(head, ResponseHead)
                return head, parser.rest

    def _poll_slots(self) -> tuple[SlotView, str]:
        """Asks /slots about our slot: BUSY, IDLE, or UNAVAILABLE with what went wrong."""
        try:
            resp = self._exchange("GET", slots_target(self.cfg.model), None)
        except InferError as exc:
            return SlotView.UNAVAILABLE, exc.describe()
        if resp.status != 200:
            text = resp.body[:200].decode("utf-8", "replace")
            return SlotView.UNAVAILABLE, f"HTTP {resp.status}: {text}"
        try:
            slots = parse_slots(resp.body)
        except BadResponse as exc:
            return SlotView.UNAVAILABLE, str(exc)
        for state in slots:
            if state.id == self.slot:
                return (SlotView.BUSY if state.is_processing else SlotView.IDLE), ""
        ids = ", ".join(str(s.id) for s in slots)
        return SlotView.UNAVAILABLE, f"slot {self.slot} is not among /slots ids [{ids}]"

    # -- an error status --
    def _http_error(self, conn: Connection, head: ResponseHead, rest: bytes) -> HttpStatus:
        """The error with up to 4 KiB of its body: what came before a close, the liveness
        deadline or a bad byte."""
        parts: list[bytes] = []
        deadline = _now() + self.liveness_s
        try:
            decoder = body_decoder(head, self.cfg.max_body_bytes)
            data: bytes | None = rest
            while True:
                parts.append(decoder.feed(data or b""))
                if decoder.done or sum(map(len, parts)) >= HTTP_BODY_CAP_BYTES:
                    break
                if (left := deadline - _now()) <= 0 or not (data := conn.recv(left)):
                    break  # the close, or the deadline: keep what came
        except BadResponse:
            pass  # the status is the news; a broken body is kept as far as it went
        text = b"".join(parts)[:HTTP_BODY_CAP_BYTES].decode("utf-8", "replace")
        return HttpStatus(head.status, text)

    # -- steps 3 to 5: the stream --
    def _stream(self, conn: Connection, head: ResponseHead, rest: bytes) -> Completion:
        decoder = body_decoder(head, None)  # a stream is bounded by the completion caps
        events = EventStream(self.cfg.max_sse_line_bytes)
        asm = Assembler(CompletionLimits.from_config(self.cfg))
        guard = ThinkingGuard(self.cfg.thinking_cap, self.cfg.thinking_overrun)
        deadline = _now() + self.liveness_s
        data = rest
        try:
            while True:
                progress = asm.progress
                for payload in events.feed(decoder.feed(data)):
                    for event in asm.feed(payload):
                        self.on_event(event)
                    self._check_thinking(asm, guard)
                if events.done or decoder.done:
                    break
                now = _now()  # after the events, and after a reasoning_end call among them
                if asm.progress != progress and not asm.finished:
                    deadline = now + self.liveness_s
                got = conn.recv(deadline - now) if now < deadline else None
                if got is None:
                    raise Stalled(
                        f"no progress for {self.cfg.liveness_ms} ms (liveness_ms) in the middle "
                        f"of the stream, after {decoder.received} body bytes: no complete event "
                        "with a delta or prompt progress (pings and partial lines do not count)"
                    )
                if not got:
                    self._closed(decoder.end)
                    break
                data = got
        except (Stalled, StreamClosedEarly, BadResponse):
            # After the finish_reason the completion is whole; what follows can't spoil it.
            if not asm.finished:
                raise
        return asm.completion(thinking_capped=guard.capped_at is not None)

    @staticmethod
    def _closed(end: Callable[[], None]) -> None:
        try:
            end()
        except TruncatedBody as exc:
            raise StreamClosedEarly(f"the stream was cut: {exc}") from None

    def _check_thinking(self, asm: Assembler, guard: ThinkingGuard) -> None:
        tokens = asm.reasoning_tokens
        action = guard.check(tokens)
        if action is Thinking.CAP:
            self._end_reasoning(asm.id, tokens)
            guard.capped(tokens)
            self.on_event(ThinkingCappedEvent(tokens))
        elif action is Thinking.OVERRUN:
            raise ThinkingOverrun(
                f"reasoning went on for {tokens - (guard.capped_at or 0)} tokens after "
                f"reasoning_end was posted at {guard.capped_at} (thinking_overrun = "
                f"{self.cfg.thinking_overrun}); the connection is closed to stop it"
            )

    def _end_reasoning(self, completion_id: str | None, tokens: int) -> None:
        """POST reasoning_end; ThinkingOverrun unless the server answers `success: true`."""
        why = f"reasoning reached {tokens} tokens (thinking_cap = {self.cfg.thinking_cap})"
        if completion_id is None:
            raise ThinkingOverrun(f"{why} but the stream carried no completion id to end it")
        try:
            resp = self._exchange("POST", CONTROL_PATH, control_body(completion_id, self.cfg.model))
            if resp.status != 200:
                text = resp.body[:200].decode("utf-8", "replace")
                raise ThinkingOverrun(f"{why}; reasoning_end answered HTTP {resp.status}: {text}")
            ok, message = parse_control(resp.body)
        except ThinkingOverrun:
            raise
        except InferError as exc:
            raise ThinkingOverrun(f"{why}; the reasoning_end call failed: {exc}") from None
        if not ok:
            said = message or resp.body[:200].decode("utf-8", "replace")
            raise ThinkingOverrun(f"{why}; the server refused reasoning_end: {said}")

    def _exchange(self, method: str, target: str, body: bytes | None) -> Response:
        return short_exchange(self.cfg, method, target, body, self.clock)
