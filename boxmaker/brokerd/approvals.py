"""Calls held for the owner's answer, and the answers.

A held call waits on its own Event for at most `approval_timeout_ms`. Only an answer from
owner.sock that names the call's id AND carries its hash (tool + canonical arguments) can approve
it: an approval for another call, or for the same id with other arguments, approves nothing.
There is no default: an empty answer, a timeout, or an owner connection that closes after it
took the call (`claim`) without answering is a denial.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from boxmaker.proto.broker import ANSWERS, HeldCall


@dataclass
class Held:
    call: HeldCall  # what the owner is shown, whole (proto.broker says each field)
    answer: str | None = None  # yes | no | always | empty | closed | timeout
    done: threading.Event = field(default_factory=threading.Event)
    until: float | None = None  # time.monotonic() when brokerd stops waiting (wait sets it)

    @property
    def id(self) -> str:
        return self.call.id

    @property
    def hash(self) -> str:
        return self.call.hash

    def view(self) -> dict[str, Any]:
        """The call as the owner is sent it, with how long brokerd still waits, when known."""
        if self.until is None:
            return self.call.to_json()
        left = max(0, round((self.until - time.monotonic()) * 1000))
        return replace(self.call, wait_ms=left).to_json()


class Approvals:
    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()

    def hold(self, call: HeldCall, timeout_s: float | None = None) -> Held:
        held = Held(call, until=None if timeout_s is None else time.monotonic() + timeout_s)
        with self._lock:
            self._held[held.id] = held
        return held

    def wait(self, held: Held, timeout_s: float) -> str:
        """The answer, or "timeout"; the call is no longer held afterwards."""
        if held.until is not None:  # the wait the owner was told of, from when it was held
            timeout_s = max(0.0, held.until - time.monotonic())
        held.done.wait(timeout_s)
        with self._lock:
            self._held.pop(held.id, None)
            if held.answer is None:
                held.answer = "timeout"
        return held.answer

    def pending(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def get(self, call_id: str) -> Held | None:
        with self._lock:
            return self._held.get(call_id)

    def answer(self, call_id: str, call_hash: str, answer: str) -> str | None:
        """None when the answer was taken, else why not (for the owner's error frame)."""
        with self._lock:
            held = self._held.get(call_id)
            if held is None or held.answer is not None:
                return f"no call {call_id!r} is waiting for an answer (timed out, or answered)"
            if call_hash != held.hash:
                return "the hash does not match the held call: an approval binds one exact call"
            held.answer = answer if answer in ANSWERS else "empty"
            held.done.set()
        return None

    def deny(self, call_id: str, why: str) -> None:
        with self._lock:
            held = self._held.get(call_id)
            if held is not None and held.answer is None:
                held.answer = why
                held.done.set()
