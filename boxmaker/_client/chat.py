"""gatewayd's client of brokerd's chat.sock: the held calls as the chat may show them, and the
owner's yes or no relayed from Mattermost (proto/broker.py's chat kinds). Blocking; nothing here
posts or prints."""

from __future__ import annotations

from pathlib import Path

from boxmaker._framed import FramedClient
from boxmaker.proto.broker import CHAT_KINDS, ChatAnswer, ChatCall

CHAT_TIMEOUT_S = 10.0  # brokerd answers pending and answer at once


def chat_calls(path: Path | str, timeout_s: float = CHAT_TIMEOUT_S) -> list[ChatCall]:
    """The calls brokerd holds now. Raises OSError (no socket: the switch is off; or not
    gatewayd's uid), ProtocolError, BodyError."""
    with FramedClient(str(path), CHAT_KINDS, timeout_s) as conn:
        (reply,) = conn.exchange("pending", {})
    if reply.kind != "pending":
        raise OSError(f"brokerd refused: {reply.body.get('message')}")
    return [ChatCall.from_json(c) for c in reply.body.get("calls", [])]


def chat_answer(
    path: Path | str, answer: ChatAnswer, timeout_s: float = CHAT_TIMEOUT_S
) -> str | None:
    """Relays `answer`; None when brokerd took it, else brokerd's reason. Raises OSError."""
    with FramedClient(str(path), CHAT_KINDS, timeout_s) as conn:
        (reply,) = conn.exchange("answer", answer.to_json())
    return None if reply.kind == "answered" else str(reply.body.get("message"))
