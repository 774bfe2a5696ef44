"""What gatewayd says in the chat besides answers: errors, notices, approvals. [core]

Each is one short post that says what happened and what to do (M4 section 7). Text from
elsewhere (a tool call's summary) is shown escaped: control, format and separator characters as
`\\uNNNN` codes, inside a code block whose fence is longer than any run of backticks in it, so
nothing in it can format, hide or reorder the rest of the post.
"""

from __future__ import annotations

import re
import unicodedata

from boxmaker.proto import ErrorCode, WireError

_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn"})

_WHAT_TO_DO = {
    ErrorCode.TURN_LIMIT: (
        "The turn hit its tool-call limit before it answered. Ask again, in smaller steps, for "
        "what is not done. loopd said:"
    ),
    ErrorCode.SESSION_FULL: (
        "This conversation's context is full. Start a new thread (or on the box: "
        "`bxctl chat --session {session}` then `/compact`)."
    ),
    ErrorCode.INFERENCE: (
        "The model server failed. Send your message again in a minute; if it keeps failing, "
        "check `supervisorctl status` on the box."
    ),
    ErrorCode.INTERRUPTED: (
        "This message's turn was cut before it answered (a restart), and it was not run again, "
        "since its tools may have run. Send it again if you still want it."
    ),
    ErrorCode.STOPPED: "The turn was stopped on the box. Send your message again to ask anew.",
    ErrorCode.SESSION_BUSY: "This conversation is busy on the box. Send your message again later.",
    ErrorCode.UNAVAILABLE: "loopd cannot take turns right now. Send your message again later.",
}


def escaped(text: str) -> str:
    """`text` with every character that could hide or reorder others as a `\\uNNNN` code (tabs
    too; newlines kept)."""
    out = []
    for ch in text:
        if ch != "\n" and (ch == "\t" or unicodedata.category(ch) in _HIDDEN):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)


def code_block(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{escaped(text)}\n{fence}"


def error_post(error: WireError, session: str) -> str:
    what = _WHAT_TO_DO.get(error.code, "Something failed on the box. Send your message again.")
    post = f"**{error.code.value}**: {what.format(session=session)}"
    if error.code is ErrorCode.TURN_LIMIT:  # which limit, and what the turn changed before it
        post += "\n" + code_block(error.message)
    return post


def loopd_down(session: str) -> str:
    return (
        "**loopd is not reachable**: your message was not run. It is answered when loopd is "
        f"back if you send it again (on the box: `supervisorctl status`; session `{session}`)."
    )


def queue_full(bound: int) -> str:
    return (
        f"**busy**: {bound} messages already wait in this conversation (queue_per_session). "
        "This one was not taken; send it again once the answers have come."
    )


def too_long(chars: int, limit: int) -> str:
    return (
        f"**too long**: this message is {chars:,} characters and at most {limit:,} are taken "
        "(max_inbound_chars). It was not run; send it shorter or in parts."
    )


def approval_post(tool: str, summary: str, session: str) -> str:
    return (
        f"**approval needed**: the tool `{escaped(tool)}` wants to run:\n"
        f"{code_block(summary)}\n"
        "Answer on the box: `bxctl approve` (or in an open `bxctl chat`). The turn waits for the "
        f"answer until brokerd's approval timeout. Session `{session}`."
    )


def attachments_note(count: int) -> str:
    return f"[attachment: {count} file(s), not read]"
