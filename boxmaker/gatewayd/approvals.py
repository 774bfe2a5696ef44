"""The owner's approval answers in the chat: their shape, and what gatewayd says. [core]

Only with brokerd's switch on (M4 section 8, docs/gateway.md): a held call's question in the chat
carries a short code brokerd derived from the call, and the owner answers it in the direct
channel with the bot: `yes <code>` or `no <code>`. A post of that shape (`always`, `y`, `n`, `a`
too, and a code of any length: brokerd refuses them, saying why) is an answer, never a turn;
anything else is a turn as before. brokerd alone decides: gatewayd relays the words, the code,
the post id and the user id, and posts what brokerd said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from boxmaker.gatewayd.messages import approval_post, code_block, escaped

_SHAPE = re.compile(r"\s*(yes|no|always|y|n|a)\s+([A-Za-z0-9]{1,16})\s*[.!]?\s*", re.I)


@dataclass(frozen=True, slots=True)
class Said:
    answer: str  # as typed, lowercased: brokerd takes yes and no only
    code: str


def answer_in(message: str) -> Said | None:
    """The answer a post's text gives, or None when it is not of the answer's shape."""
    m = _SHAPE.fullmatch(message)
    return None if m is None else Said(m.group(1).lower(), m.group(2).lower())


def question(
    tool: str, summary: str, code: str, wait_ms: int | None, session: str, dm: bool
) -> str:
    """The held call whole, as brokerd shows it, with the code and how to answer."""
    where = "here" if dm else "in a direct message to me (not in this thread)"
    wait = f" within {round(wait_ms / 1000)} s" if wait_ms is not None else ""
    return (
        f"**approval needed**: the tool `{escaped(tool)}` wants to run:\n"
        f"{code_block(summary)}\n"
        f'Answer {where}{wait}: `yes {code}` or `no {code}` ("always" only on the box: '
        f"`bxctl approve`). Session `{session}`."
    )


def box_only(tool: str, brief: str, why: str, session: str) -> str:
    """The notice for a held call the chat may not answer: loopd's brief line, and why."""
    return f"{approval_post(tool, brief, session)}\n(Not from the chat: {escaped(why)}.)"


def verdict(said: Said, refused: str | None) -> str:
    """The reply to an answer post: what brokerd did with it."""
    if refused is None:
        done = "the call runs" if said.answer == "yes" else "the call is denied"
        return f"**{said.answer}** taken for `{said.code}`: {done}."
    return (
        f"**not taken**: {escaped(refused)}. Nothing was approved or denied by this message; "
        "answer on the box with `bxctl approve` if the call still waits."
    )
