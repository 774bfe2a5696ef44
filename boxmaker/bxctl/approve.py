"""The owner's side of an approval in `bxctl chat --owner-socket <owner.sock>` (issue 22).

When loopd relays brokerd's `approval_needed`, the chat claims the call on owner.sock (brokerd's
answer, proto.broker.HeldCall, holds the tool as brokerd parsed it, the whole call, why it asks,
the grant "always" would add and the call's hash), asks on stderr, reads one line of stdin and
answers brokerd directly: loopd never sees the answer. The tool named is brokerd's, never loopd's
event's.
There is no default: an empty line is a denial, and EOF (or a chat that closes) leaves the claim
unanswered, which brokerd takes as a denial too. Ctrl-C at the question (on a terminal) denies the
call and stops the answer, as Esc does at Codex's and Claude Code's: the Canceller is told a
question is open, so the first Ctrl-C interrupts the read instead of leaving it waiting.

What the owner sees (issue 27 class 4) is brokerd's own account of the call, never loopd's: the
tool as brokerd names it, the whole summary (wrapped by the terminal, never cut) with every
control and format character escaped visibly (escape.py), why it asks, then the grant
"always" would add, each part on its own lines, then the question. brokerd never sends part of a
call: one it cannot send whole is denied there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from boxmaker._cli import Environment
from boxmaker._client.channel import Canceller
from boxmaker._client.owner import OwnerClient, OwnerRefused
from boxmaker.proto import ApprovalNeededEvent, ChannelBody
from boxmaker.proto.broker import HeldCall
from boxmaker.proto.errors import ProtocolError
from boxmaker.proto.frame import Frame

from .escape import one_line, visible
from .terminal import echo

WORDS = {"y": "yes", "yes": "yes", "a": "always", "always": "always", "n": "no", "no": "no"}

Show = Callable[[Frame, ChannelBody], None]


def ask_owner(
    path: Path, event: ApprovalNeededEvent, env: Environment, canceller: Canceller | None = None
) -> str:
    """Claims the call, asks, answers brokerd. Returns what was answered ("" for nothing)."""
    err = env.stderr
    try:
        with OwnerClient(path) as owner:
            try:
                held = owner.claim(event.id)
            except OwnerRefused as refused:
                err.write(f"[approval: brokerd says {refused}]\n")
                return ""
            err.write(layout(held))
            err.flush()
            line = _read_answer(env, canceller)
            if line is None:  # Ctrl-C: no, and the answer stops (the Canceller sent its cancel)
                err.write("\n[approval: Ctrl-C: denied; stopping the answer]\n")
                line = "no\n"
            elif not line:  # EOF: no answer; brokerd denies when this connection closes
                err.write("\n[approval: no answer (end of input): denied]\n")
                return ""
            typed = line.strip().lower()
            answer = WORDS.get(typed, "" if not typed else "no")
            not_taken = owner.answer_or_refusal(event.id, held.hash, answer)
    except (OSError, ProtocolError) as exc:
        err.write(f"[approval: cannot reach brokerd's owner.sock at {path}: {exc}; denied]\n")
        return ""
    if not_taken is not None:  # withdrawn meanwhile (the turn was stopped), or timed out
        err.write(f"[approval: not taken: brokerd says {not_taken}]\n")
        err.flush()
        return ""
    granted = answer in ("yes", "always")
    err.write(f"[approval: {answer or 'empty'}: {'approved' if granted else 'denied'}]\n")
    err.flush()
    return answer


def _read_answer(env: Environment, canceller: Canceller | None) -> str | None:
    """A line of stdin ("" at EOF), or None when Ctrl-C interrupted it."""
    if canceller is None:
        return env.stdin.readline()
    canceller.asking = True
    try:
        with echo(_fd(env), True):  # the chat turns echo off while a turn runs
            return env.stdin.readline()
    except KeyboardInterrupt:
        return None
    finally:
        canceller.asking = False


def _fd(env: Environment) -> int | None:
    try:
        return env.stdin.fileno() if env.stdin.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None


def indented(text: str) -> str:
    """Every line of `text` (escaped) indented by four spaces, ending in a newline."""
    shown = visible(text)
    lines = shown.text.split("\n") if shown.text else ["(nothing)"]
    return "".join(f"    {line}\n" for line in lines)


def layout(held: HeldCall) -> str:
    """The approval as the owner reads it: each part on lines of its own, the summary once.
    brokerd sends the whole call or none of it (a prompt over one frame is denied there), so
    what is shown here is all there is to approve."""
    tool = one_line(held.tool)
    shown = visible(held.summary)
    note = f"{len(held.summary)} characters"
    if shown.escaped:
        note += (
            f"; {shown.escaped} control or format characters shown as \\xNN / \\uNNNN, "
            "and each backslash as \\\\"
        )
    parts = [f"[approval] brokerd holds a call of {tool}:\n", f"  the whole call ({note}):\n"]
    parts.append(indented(held.summary))
    if held.reason:
        parts += ["  it asks because:\n", indented(held.reason)]
    if held.always:
        parts += ['  "always" would add this grant:\n', indented(held.always.rstrip("\n"))]
    else:
        parts += ['  "always" adds no grant:\n', indented(held.no_always)]
    parts.append(f"approve {tool}? [y]es / [n]o / [a]lways: ")
    return "".join(parts)


def approving(show: Show, path: Path, env: Environment, canceller: Canceller | None = None) -> Show:
    """`show`, then the owner's question for each approval_needed event."""

    def wrapped(frame: Frame, body: ChannelBody) -> None:
        show(frame, body)
        if isinstance(body, ApprovalNeededEvent):
            ask_owner(path, body, env, canceller)

    return wrapped
