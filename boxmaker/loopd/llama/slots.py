"""What the cache keeper asks llama-server: /slots, and slot save and restore (issue 14).

    POST /slots/<id>?action=save     {"filename"}  -> n_saved, n_written, timings.save_ms
    POST /slots/<id>?action=restore  {"filename"}  -> n_restored, n_read, timings.restore_ms

The files live in the server's `--slot-save-path` folder; a server started without it answers
HTTP 501. A router routes by `?model=` and the body's "model": both carry the configured id.
Each call is one short exchange on infer.sock (llama.transport), within control_timeout_ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from boxmaker.loopd.config import InferenceConfig
from boxmaker.loopd.llama.http import target
from boxmaker.loopd.llama.info import (
    SlotIO,
    SlotState,
    parse_prompt_rate,
    parse_slot_io,
    parse_slots,
    slots_target,
)
from boxmaker.loopd.llama.transport import short_call

# The status of a server started without --slot-save-path.
NOT_SUPPORTED = 501
# The prompt loopd times at start-up (on the self-test's slot), to price a re-read.
RATE_TOKENS = 192


class SlotFiles:
    def __init__(self, config: InferenceConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self._clock = clock

    def slots(self) -> tuple[SlotState, ...]:
        """GET /slots: each slot as llama.info parses it.

        Raises:
            InferError: no answer, an HTTP error, or an answer of the wrong shape.
        """
        return parse_slots(self._call("GET", slots_target(self.config.model), None))

    def prompt_rate(self, slot: int) -> float | None:
        """Reads a prompt of about RATE_TOKENS tokens into `slot`, uncached, generating one:
        the server's microseconds per prompt token (None: it read too few to say)."""
        text = " ".join(f"w{k % 89}q{k // 89}" for k in range(RATE_TOKENS // 3))
        body = orjson.dumps({"model": self.config.model, "prompt": text, "n_predict": 1,
                             "id_slot": slot, "cache_prompt": False})  # fmt: skip
        return parse_prompt_rate(self._call("POST", "/completion", body))

    def save(self, slot: int, filename: str) -> SlotIO:
        """Saves the slot's cache to `filename` in the server's save folder.

        Raises:
            InferError: HttpStatus 501 when the server has no --slot-save-path.
        """
        return self._action(slot, "save", filename)

    def restore(self, slot: int, filename: str) -> SlotIO:
        """Loads `filename` into the slot (HttpStatus 400 when it is missing or does not fit)."""
        return self._action(slot, "restore", filename)

    def _action(self, slot: int, action: str, filename: str) -> SlotIO:
        path = target(f"/slots/{slot}", action=action, model=self.config.model)
        body = orjson.dumps({"filename": filename, "model": self.config.model})
        return parse_slot_io(self._call("POST", path, body), action)

    def _call(self, method: str, path: str, body: bytes | None) -> bytes:
        return short_call(self.config, method, path, body, self._clock).body
