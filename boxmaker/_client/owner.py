"""The owner's client of brokerd's owner.sock: list the held calls, claim one, answer it.

The protocol is `proto/broker.py`'s owner kinds: `pending` (answered `pending {calls}`), `claim`
(answered `call`, the HeldCall whole, or `error`), `answer` (answered `answered` or `error`).
Terminal faces (`bxctl chat`'s question, `bxctl approve`) and gatewayd's notices sit on this;
nothing here prints.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from boxmaker._framed import FramedClient
from boxmaker.proto.broker import OWNER_KINDS, Answer, Claim, HeldCall

OWNER_TIMEOUT_S = 10.0  # brokerd answers pending, claim and answer at once


class OwnerRefused(Exception):
    """brokerd answered `error` (the call is gone, already claimed, the hash moved): its message."""


class OwnerClient:
    """One connection to owner.sock. Raises OSError or ProtocolError when brokerd cannot be
    reached or breaks the protocol, OwnerRefused when it refuses."""

    def __init__(self, path: Path | str, timeout_s: float = OWNER_TIMEOUT_S) -> None:
        self._conn = FramedClient(str(path), OWNER_KINDS, timeout_s)

    def __enter__(self) -> OwnerClient:
        self._conn.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._conn.__exit__(kind, exc, tb)

    def pending(self) -> list[HeldCall]:
        """The calls brokerd holds now, oldest first."""
        (reply,) = self._conn.exchange("pending", {})
        if reply.kind != "pending":
            raise OwnerRefused(str(reply.body.get("message")))
        return [HeldCall.from_json(c) for c in reply.body.get("calls", [])]

    def claim(self, call_id: str) -> HeldCall:
        """Claims the held call `call_id`: this connection answers it (closing it denies)."""
        (reply,) = self._conn.exchange("claim", Claim(call_id).to_json())
        if reply.kind != "call":
            raise OwnerRefused(str(reply.body.get("message")))
        return HeldCall.from_json(reply.body)

    def answer(self, call_id: str, call_hash: str, answer: str) -> bool:
        """Answers a claimed call ("yes", "no", "always"); True when brokerd took the answer."""
        return self.answer_or_refusal(call_id, call_hash, answer) is None

    def answer_or_refusal(self, call_id: str, call_hash: str, answer: str) -> str | None:
        """Answers a claimed call: None when brokerd took the answer, else brokerd's reason
        (the call is no longer held: loopd withdrew it, it timed out; or the hash moved)."""
        (reply,) = self._conn.exchange("answer", Answer(call_id, call_hash, answer).to_json())
        return None if reply.kind == "answered" else str(reply.body.get("message"))
