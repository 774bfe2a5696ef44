"""brokerd's sockets: their frame kinds and the typed body of each (M3). Frames as on
loop.sock (proto.frame); bodies decoded strictly (`decode`), like the channel's.

broker.sock (loopd's uid): loopd sends `list` (answered `tools {tools}`, final) or `call`
(`CallBody`: the arguments as JSON text, the session's id and epoch; brokerd keeps each
session's taint from its own log). While the owner is asked brokerd sends `approval_needed`
(`ApprovalNeeded`, not final): the tool as brokerd parsed it and a `brief` line made from the
arguments alone (nothing read from a file: loopd is not the owner). Then `result` (a
ToolResponse, final). Anything wrong: `error` (final).

owner.sock (the owner's uid): the owner sends `pending` (answered `pending {calls}`, a list of
`HeldCall`), `claim {id}` (answered `call`, a `HeldCall`: a claimed call left unanswered when
the connection closes is denied) and `answer {id, hash, answer}` (`Answer`; answered
`answered {id, answer}`).

chat.sock (gatewayd's uid; only when brokerd's `[broker.chat_approvals]` turns it on): gatewayd
sends `pending` (answered `pending {calls}`, a list of `ChatCall`: every held call, with a `code`
when it may be answered from the chat, else `box_only` saying why) and `answer {code, answer,
post_id, user_id}` (`ChatAnswer`: `yes` or `no` only; answered `answered {id, answer}`, or
`error` when nothing was approved or denied).

`HeldCall` is what the owner's prompt shows, whole, and what a terminal must render (bxctl
chat): `tool` is brokerd's own name for the call (its parse, never loopd's word); `summary` is
the WHOLE call (the whole command, note, diff: never cut; it may hold any character, control and
format characters included, which a terminal must show escaped); `reason` says why it asks when
a taint made it ask ("" otherwise); `always` is the exact rule an "always" answer adds, as TOML,
or "" when it adds none, and then `no_always` says why. `hash` binds the answer to this call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from ._codec import STR, UINT, UINT_OR_ABSENT, from_obj, to_obj, wire

BROKER_KINDS = frozenset({"list", "call", "tools", "approval_needed", "result", "error"})
OWNER_KINDS = frozenset({"pending", "claim", "answer", "call", "answered", "error"})
CHAT_KINDS = frozenset({"pending", "answer", "answered", "error"})
ANSWERS = ("yes", "no", "always")
CHAT_ANSWERS = ("yes", "no")  # never "always": a rule is added on the box only


class _Body:
    def to_json(self) -> dict[str, Any]:
        return to_obj(self, type(self).__name__)

    @classmethod
    def from_json(cls, obj: object, path: str | None = None) -> Self:
        """Raises BodyError (proto.errors) naming the key that is wrong."""
        return from_obj(cls, obj, path or cls.__name__)


@dataclass(frozen=True, slots=True)
class CallBody(_Body):
    """broker.sock `call`."""

    tool: str = field(metadata=wire(STR))
    arguments: str = field(metadata=wire(STR))  # JSON text, as the model wrote it
    session: str = field(default="", metadata=wire(STR))
    epoch: int = field(default=0, metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class _HeldView(_Body):
    """A held call as one of brokerd's peers is shown it (the first keys of each such body):
    its id, brokerd's name for the tool, and what that peer may read of the call."""

    id: str = field(metadata=wire(STR))
    tool: str = field(metadata=wire(STR))
    summary: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class ApprovalNeeded(_HeldView):
    """broker.sock `approval_needed`: what loopd may know while the owner is asked. `summary`
    is the brief line (the channel's ApprovalNeededEvent carries it on)."""


@dataclass(frozen=True, slots=True)
class Claim(_Body):
    """owner.sock `claim`."""

    id: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class HeldCall(_HeldView):
    """owner.sock `call` (and each of `pending`'s calls): the owner's prompt, whole."""

    reason: str = field(metadata=wire(STR))
    always: str = field(metadata=wire(STR))
    no_always: str = field(metadata=wire(STR))
    hash: str = field(metadata=wire(STR))
    # how long brokerd still waits for the answer, as it sends this (issue 39 item 6)
    wait_ms: int | None = field(default=None, metadata=wire(UINT_OR_ABSENT))


@dataclass(frozen=True, slots=True)
class Answer(_Body):
    """owner.sock `answer`: yes, no or always; anything else is a denial ("empty")."""

    id: str = field(metadata=wire(STR))
    hash: str = field(metadata=wire(STR))
    answer: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class Answered(_Body):
    id: str = field(metadata=wire(STR))
    answer: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class ChatCall(_HeldView):
    """chat.sock `pending`'s calls: a held call as the chat may show it. `code` (derived from the
    call's id and hash) is what an answer quotes; "" when the call is box-only, and then
    `box_only` says why and `summary` is "" (gatewayd shows loopd's brief line)."""

    code: str = field(metadata=wire(STR))
    box_only: str = field(metadata=wire(STR))
    wait_ms: int | None = field(default=None, metadata=wire(UINT_OR_ABSENT))


@dataclass(frozen=True, slots=True)
class ChatAnswer(_Body):
    """chat.sock `answer`: the owner's yes or no from Mattermost, the code it quoted, and the
    post and user that said it (logged with the decision)."""

    code: str = field(metadata=wire(STR))
    answer: str = field(metadata=wire(STR))
    post_id: str = field(metadata=wire(STR))
    user_id: str = field(metadata=wire(STR))
