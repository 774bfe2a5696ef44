"""The owner's side of an approval in `bxctl chat --owner-socket <owner.sock>` (issue 22).

When loopd relays brokerd's `approval_needed`, the chat claims the call on owner.sock (brokerd's
answer holds the call's hash and the grant "always" would add, shown before the question), asks
on stderr, reads one line of stdin and answers brokerd directly: loopd never sees the answer.
There is no default: an empty line is a denial, and EOF (or a chat that closes) leaves the claim
unanswered, which brokerd takes as a denial too.

What the owner sees (issue 27 class 4) is brokerd's own account of the call, never loopd's: the
tool as brokerd names it, the whole summary (wrapped by the terminal, never cut) with every
control and format character escaped visibly (escape.py), then the grant "always" would add,
each part on its own lines, then the question. A call brokerd says it cannot show whole
(`"whole": false` in its `call`) can only be denied: the question offers no yes.
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

from .escape import one_line, visible

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
            whole = body.get("whole", True) is True and isinstance(body.get("summary"), str)
            tool = one_line(str(body.get("tool", event.tool)))
            err.write(
                layout(tool, str(body.get("summary", "")), str(body.get("always", "")), whole)
            )
            err.flush()
            line = env.stdin.readline()
            if not line:  # EOF: no answer; brokerd denies when this connection closes
                err.write("\n[approval: no answer (end of input): denied]\n")
                return ""
            typed = line.strip().lower()
            answer = WORDS.get(typed, "" if not typed else "no")
            if not whole and answer != "no":
                err.write("[approval: the call was not shown whole, so it cannot be approved]\n")
                answer = "no"
            _send(sock, "answer", {"id": event.id, "hash": body["hash"], "answer": answer})
            reply = _recv(sock, decoder)
    except (OSError, ProtocolError) as exc:
        err.write(f"[approval: cannot reach brokerd's owner.sock at {path}: {exc}; denied]\n")
        return ""
    granted = reply.kind == "answered" and answer in ("yes", "always")
    err.write(f"[approval: {answer or 'empty'}: {'approved' if granted else 'denied'}]\n")
    err.flush()
    return answer


def indented(text: str) -> str:
    """Every line of `text` (escaped) indented by four spaces, ending in a newline."""
    shown = visible(text)
    lines = shown.text.split("\n") if shown.text else ["(nothing)"]
    return "".join(f"    {line}\n" for line in lines)


def layout(tool: str, summary: str, always: str, whole: bool) -> str:
    """The approval as the owner reads it: each part on lines of its own, the summary once."""
    shown = visible(summary)
    note = f"{len(summary)} characters"
    if shown.escaped:
        note += (
            f"; {shown.escaped} control or format characters shown as \\xNN / \\uNNNN, "
            "and each backslash as \\\\"
        )
    parts = [f"[approval] brokerd holds a call of {tool}:\n"]
    if whole:
        parts.append(f"  the whole call ({note}):\n")
    else:
        parts.append(f"  PART of the call ({note}; brokerd could not show all of it):\n")
    parts.append(indented(summary))
    parts.append('  "always" would add this grant:\n')
    parts.append(indented(always.rstrip("\n")))
    question = "[y]es / [n]o / [a]lways" if whole else "only [n]o (it was not shown whole)"
    parts.append(f"approve {tool}? {question}: ")
    return "".join(parts)


def approving(show: Show, path: Path, env: Environment) -> Show:
    """`show`, then the owner's question for each approval_needed event."""

    def wrapped(frame: Frame, body: ChannelBody) -> None:
        show(frame, body)
        if isinstance(body, ApprovalNeededEvent):
            ask_owner(path, body, env)

    return wrapped
