"""The owner's side of an approval in `bxctl chat --owner-socket <owner.sock>` (issue 22).

When loopd relays brokerd's `approval_needed`, the chat claims the call on owner.sock (brokerd's
answer, proto.broker.HeldCall, holds the tool as brokerd parsed it, the whole call, why it asks,
the grant "always" would add and the call's hash), asks on stderr, reads one line of stdin and
answers brokerd directly: loopd never sees the answer. The tool named is brokerd's, never loopd's
event's. (How a terminal shows the summary's control characters is render.py's.)
There is no default: an empty line is a denial, and EOF (or a chat that closes) leaves the claim
unanswered, which brokerd takes as a denial too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from boxmaker._cli import Environment
from boxmaker._framed import FramedClient
from boxmaker.proto import ApprovalNeededEvent, ChannelBody
from boxmaker.proto.broker import OWNER_KINDS, Answer, Claim, HeldCall
from boxmaker.proto.errors import ProtocolError
from boxmaker.proto.frame import Frame

OWNER_TIMEOUT_S = 10.0  # brokerd answers claim and answer at once
WORDS = {"y": "yes", "yes": "yes", "a": "always", "always": "always", "n": "no", "no": "no"}

Show = Callable[[Frame, ChannelBody], None]


def ask_owner(path: Path, event: ApprovalNeededEvent, env: Environment) -> str:
    """Claims the call, asks, answers brokerd. Returns what was answered ("" for nothing)."""
    err = env.stderr
    try:
        with FramedClient(str(path), OWNER_KINDS, OWNER_TIMEOUT_S) as owner:
            (claimed,) = owner.exchange("claim", Claim(event.id).to_json())
            if claimed.kind != "call":
                err.write(f"[approval: brokerd says {claimed.body.get('message')}]\n")
                return ""
            held = HeldCall.from_json(claimed.body)
            err.write(f"{held.tool} wants to:\n{held.summary}\n")
            if held.reason:
                err.write(f"it asks because: {held.reason}\n")
            if held.always:
                err.write(f'"always" would add this grant:\n{held.always}')
            else:
                err.write(f'"always" adds {held.no_always}\n')
            err.write(f"approve {held.tool}? [y]es / [n]o / [a]lways: ")
            err.flush()
            line = env.stdin.readline()
            if not line:  # EOF: no answer; brokerd denies when this connection closes
                err.write("\n[approval: no answer (end of input): denied]\n")
                return ""
            typed = line.strip().lower()
            answer = WORDS.get(typed, "" if not typed else "no")
            (reply,) = owner.exchange("answer", Answer(event.id, held.hash, answer).to_json())
    except (OSError, ProtocolError) as exc:
        err.write(f"[approval: cannot reach brokerd's owner.sock at {path}: {exc}; denied]\n")
        return ""
    granted = reply.kind == "answered" and answer in ("yes", "always")
    err.write(f"[approval: {answer or 'empty'}: {'approved' if granted else 'denied'}]\n")
    err.flush()
    return answer


def approving(show: Show, path: Path, env: Environment) -> Show:
    """`show`, then the owner's question for each approval_needed event."""

    def wrapped(frame: Frame, body: ChannelBody) -> None:
        show(frame, body)
        if isinstance(body, ApprovalNeededEvent):
            ask_owner(path, body, env)

    return wrapped
