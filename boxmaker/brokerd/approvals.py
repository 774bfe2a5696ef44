"""Calls held for the owner's answer, and the answers.

A held call waits on its own Event for at most `approval_timeout_ms`. Only an answer from
owner.sock that names the call's id AND carries its hash (tool + canonical arguments) can approve
it: an approval for another call, or for the same id with other arguments, approves nothing.
There is no default: an empty answer, a timeout, or an owner connection that closes after it
took the call (`claim`) without answering is a denial. Once the wait the owner was told of has
ended, the call timed out: an answer or a close that comes after is not taken, whichever thread
sees the deadline first.

loopd may withdraw a held call (its turn was stopped, or its tool timeout passed: it closed the
call): the call is denied at once. An owner who answers a call that is no longer held is told
what became of it (withdrawn, timed out, answered), from the last ENDED_KEPT calls that ended.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from boxmaker.proto.broker import ANSWERS, HeldCall

ENDED_KEPT = 256  # calls no longer held whose fate a late answer is told (bounded memory)


@dataclass
class Held:
    call: HeldCall  # what the owner is shown, whole (proto.broker says each field)
    answer: str | None = None  # yes | no | always | empty | closed | timeout
    done: threading.Event = field(default_factory=threading.Event)
    until: float | None = None  # time.monotonic() when brokerd stops waiting (wait sets it)
    withdrawn: bool = False  # loopd closed the call before the owner answered
    by: tuple[str, str] | None = None  # answered from the chat: the post id and the user id

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
        self._ended: OrderedDict[str, str] = OrderedDict()  # id -> what became of it
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
            self._ended[held.id] = _fate(held) or held.answer
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
            return held.answer

    def pending(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def get(self, call_id: str) -> Held | None:
        with self._lock:
            return self._held.get(call_id)

    def not_held(self, call_id: str) -> str:
        """Why `call_id` cannot be claimed or answered: what became of it, when it is known."""
        with self._lock:
            held = self._held.get(call_id)
            fate = _fate(held) if held is not None else self._ended.get(call_id)
        return f"no call {call_id!r} is waiting for an answer" + (f": {fate}" if fate else "")

    def answer(
        self, call_id: str, call_hash: str, answer: str, by: tuple[str, str] | None = None
    ) -> str | None:
        """None when the answer was taken, else why not (for the owner's error frame). `by`: the
        chat's post and user ids (chat_approvals.py), logged with the approval."""
        with self._lock:
            held = self._held.get(call_id)
            if held is not None and held.answer is None and _expired(held):
                held.answer = "timeout"  # the wait the owner was told of had ended
                held.done.set()
            if held is None or held.answer is not None:
                fate = _fate(held) if held is not None else self._ended.get(call_id)
                return f"no call {call_id!r} is waiting for an answer: " + (
                    fate or "it timed out, or was answered"
                )
            if call_hash != held.hash:
                return "the hash does not match the held call: an approval binds one exact call"
            held.answer = answer if answer in ANSWERS else "empty"
            held.by = by
            held.done.set()
        return None

    def deny(self, call_id: str, why: str, withdrawn: bool = False) -> None:
        """Ends the wait with `why` as the answer (a denial); `withdrawn`: loopd closed the
        call, and an owner who answers it later is told so."""
        with self._lock:
            held = self._held.get(call_id)
            if held is not None and held.answer is None:
                if not withdrawn and _expired(held):
                    why = "timeout"  # the owner's side closed as the wait ended: it timed out
                held.answer, held.withdrawn = why, withdrawn
                held.done.set()


def _expired(held: Held) -> bool:
    """The wait the owner was told of has ended, whichever thread notices it first."""
    return held.until is not None and time.monotonic() >= held.until


def _fate(held: Held) -> str | None:
    """What became of a call that is no longer waiting, as its owner is told."""
    if held.answer is None:
        return None
    if held.withdrawn:
        return (
            "loopd withdrew it (its turn was stopped, or its tool timeout passed) before it was "
            "answered; it was denied and did not run"
        )
    if held.answer == "timeout":
        return "nobody answered it within approval_timeout_ms; it was denied and did not run"
    return f"it was answered already ({held.answer})"
