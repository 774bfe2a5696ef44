"""The nudge rule (issue 40.2): one more completion when a turn's answer is advice or an
unsupported claim. [core]

A small tool model often answers an owner's request with instructions ("you can use the
`read_file` function..."), or says a file was written when no call wrote it. With `[loop] nudge`
on, a turn whose completion has no tool call is judged here before it ends:

- **advice**: the turn made no call at all, and the answer tells the owner how to do it or says
  it cannot (NUDGE_ADVICE);
- **claim**: the answer says something was written, saved, edited or noted, and no result of
  this turn supports it (write_file's `wrote `, edit_file's `edited `, note's `noted in `, or a
  shell run that did not fail) (NUDGE_CLAIM).

The nudge is an ordinary `user` record whose text starts with NUDGE_PREFIX: replay turns it into
a user message like any other, so a resumed session's request holds it byte for byte and the
prompt cache keeps hitting. At most one per turn, and it spends one of the turn's tool rounds
(`tool_iterations`): a turn that has used them all ends as it would have.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from boxmaker.proto import Assistant, ToolResult, User
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import call_tool_target

NUDGE_PREFIX: Final = "[loopd] "
NUDGE_ADVICE: Final = (
    NUDGE_PREFIX + "Do it yourself now with your tools instead of telling me how: call the tool "
    "(read or list first when it is about a file or folder), then answer from its result."
)
NUDGE_CLAIM: Final = (
    NUDGE_PREFIX + "No tool result in this turn shows that: nothing was written or noted. Call "
    "the tool now (read the file first if you need its text), or say plainly it was not done."
)

_ADVICE = re.compile(
    r"you can use|you could use|you can run|you can (?:open|read|check|find|create|add|edit)|"
    r"here'?s how|here is how|to do this,|you (?:would|will) need|you'?ll need|follow these|"
    r"(?:the|this) (?:following )?(?:command|code|function|tool)s? (?:will|would|can)|"
    r"\bi (?:cannot|can't|can not|am unable to|am not able to|don't have|do not have)\b|"
    r"\bi'm (?:unable|not able)\b|as an ai|please (?:provide|share|paste)|"
    r"provide (?:me with )?the (?:content|contents|text)|```(?!json)",
    re.I,
)
_CLAIM = re.compile(
    r"\b(?:i have|i've|has been|have been|successfully|is now|are now)\b[^.\n]{0,60}?"
    r"\b(?:written|wrote|created|saved|updated|edited|added|copied|changed|noted|replaced|"
    r"stored|appended|recorded|fixed|corrected)\b"
    r"|\b(?:written|saved|created|copied|added|appended|noted) (?:to|in|into|as)\b",
    re.I,
)
_NEGATED = re.compile(
    r"\b(?:not|no|never|denied|refused|declined|unable|cannot|failed)\b|n't\b", re.I
)
_SUPPORTS = ("wrote ", "edited ", "noted in ")


def is_nudge(record: LogRecord) -> bool:
    """A user record loopd wrote (a nudge), not the owner's message."""
    return type(record) is User and record.content.startswith(NUDGE_PREFIX)


def _turn_start(records: Sequence[LogRecord]) -> int:
    """The index of the owner's message of this turn (nudges are skipped)."""
    for i in range(len(records) - 1, -1, -1):
        if type(records[i]) is User and not is_nudge(records[i]):
            return i
    return 0


def nudge(records: Sequence[LogRecord], answer: str) -> str | None:
    """The nudge for a completion with no tool call whose text is `answer`, with the turn's
    records so far (the owner's message last among the user records); None: the turn ends."""
    turn = records[_turn_start(records) :]
    if any(is_nudge(r) for r in turn):
        return None  # one per turn
    ran = _calls(turn)
    if not ran and _ADVICE.search(answer):
        return NUDGE_ADVICE
    if _claims(answer) and not any(_supports(name, content) for name, content in ran):
        return NUDGE_CLAIM
    return None


def _claims(answer: str) -> bool:
    """A sentence of `answer` says something was written, with no negation in it."""
    sentences = re.split(r"(?<=[.!?])\s+|\n+", answer)
    return any(_CLAIM.search(s) and not _NEGATED.search(s) for s in sentences)


def _calls(records: Sequence[LogRecord]) -> list[tuple[str, str]]:
    """(the tool run, its result's content) for each answered call of `records`."""
    names: dict[str, str] = {}
    for r in records:
        if isinstance(r, Assistant):
            names.update((c.id, _target(c.name, c.arguments)) for c in r.tool_calls)
    results = [r for r in records if isinstance(r, ToolResult)]
    return [(names.get(r.tool_call_id, ""), r.content) for r in results]


def _target(name: str, arguments: str) -> str:
    """call_tool's target, or the name."""
    target = call_tool_target(name, arguments)
    return name if target is None else target


def _supports(tool: str, content: str) -> bool:
    """Whether a result shows something was written. A shell run that did not fail may have
    written anything: a claim after one is not second-guessed."""
    if tool == "shell":
        return not content.startswith(("error:", "not run:"))
    return content.startswith(_SUPPORTS)
