"""The owner's side of an approval in `bxctl chat --owner-socket <owner.sock>` (issue 22).

When loopd relays brokerd's `approval_needed`, the chat claims the call on owner.sock (brokerd's
answer holds the call's hash and the grant "always" would add, shown before the question), asks
on stderr, reads one line of stdin and answers brokerd directly: loopd never sees the answer.
There is no default: an empty line is a denial, and EOF (or a chat that closes) leaves the claim
unanswered, which brokerd takes as a denial too.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from boxmaker._cli import Environment
from boxmaker.proto import ApprovalNeededEvent, ChannelBody
from boxmaker.proto.broker import OWNER_KINDS
from boxmaker.proto.errors import ProtocolError
from boxmaker.proto.frame import CLOSED, NEED_DATA, Frame, FrameDecoder, encode_frame

OWNER_TIMEOUT_S = 10.0  # brokerd answers claim and answer at once
WORDS = {"y": "yes", "yes": "yes", "a": "always", "always": "always", "n": "no", "no": "no"}

Show = Callable[[Frame, ChannelBody], None]


def _recv(sock: socket.socket, decoder: FrameDecoder) -> Frame:
    while True:
        got = decoder.next_frame()
        if got is CLOSED:
            raise ConnectionResetError("brokerd closed owner.sock")
        if got is NEED_DATA:
            decoder.receive_data(sock.recv(65536))
            continue
        assert isinstance(got, Frame)
        return got


def _send(sock: socket.socket, kind: str, body: dict[str, Any]) -> None:
    sock.sendall(encode_frame(kind, body, True, OWNER_KINDS))


def ask_owner(path: Path, event: ApprovalNeededEvent, env: Environment) -> str:
    """Claims the call, asks, answers brokerd. Returns what was answered ("" for nothing)."""
    err = env.stderr
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(OWNER_TIMEOUT_S)
            sock.connect(str(path))
            decoder = FrameDecoder(OWNER_KINDS)
            _send(sock, "claim", {"id": event.id})
            claimed = _recv(sock, decoder)
            if claimed.kind != "call":
                err.write(f"[approval: brokerd says {claimed.body.get('message')}]\n")
                return ""
            body = claimed.body
            err.write(f"{event.tool} wants to:\n{body['summary']}\n")
            err.write(f'"always" would add this grant:\n{body["always"]}')
            err.write(f"approve {event.tool}? [y]es / [n]o / [a]lways: ")
            err.flush()
            line = env.stdin.readline()
            if not line:  # EOF: no answer; brokerd denies when this connection closes
                err.write("\n[approval: no answer (end of input): denied]\n")
                return ""
            typed = line.strip().lower()
            answer = WORDS.get(typed, "" if not typed else "no")
            _send(sock, "answer", {"id": event.id, "hash": body["hash"], "answer": answer})
            reply = _recv(sock, decoder)
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
