"""What became of a tool call, in one word, for the channel's tool_result (issue 39 item 6); and
what a turn ended by its limits had changed, for the owner's error line (done_before). [core]

Read from what loopd recorded: its own note for a call it answered itself, or brokerd's
`error: denied: ...` / `error: cancelled: ...` texts (brokerd/broker.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from boxmaker.loopd.tools.registry import Answer, Resolution
from boxmaker.loopd.turn.nudge import CHANGED_BY, answered_calls, this_turn
from boxmaker.proto import ToolResponse
from boxmaker.proto.log import LogRecord

_DENIED = ("(no)", "(empty)", "(closed)")  # the owner's answers brokerd denies on
_MOST_NAMED: Final = 5
_LINE_CHARS: Final = 200  # a result line, as named (a path may be long; a chat post is short)


def outcome_of(plan: Resolution, outcome: object, content: str) -> str:
    """done, refused, denied, timed_out, cancelled or failed."""
    if isinstance(plan, Answer):
        return "refused" if plan.error else "done"
    if not isinstance(outcome, ToolResponse) or not content.startswith("error: "):
        return "failed" if not isinstance(outcome, ToolResponse) else "done"
    said = content.removeprefix("error: ")
    if said.startswith("denied: the owner did not approve ("):
        answer = said.removeprefix("denied: the owner did not approve ")
        if answer.startswith("(timeout)"):
            return "timed_out"
        return "denied" if answer.startswith(_DENIED) else "refused"
    if said.startswith("denied: "):
        return "refused"
    return "cancelled" if said.startswith("cancelled: ") else "failed"


def done_before(records: Sequence[LogRecord]) -> str:
    """What the turn now ending changed, as a sentence to add to its turn_limit message; "" when
    nothing. A small model often writes the file right and then calls on (notes it, writes it
    again) until a limit ends the turn: the owner's error line must not read as "nothing done".
    """
    done = dict.fromkeys(
        _clip(content.splitlines()[0])
        for tool, content in answered_calls(this_turn(records)[0])
        if tool in CHANGED_BY and content.startswith(CHANGED_BY[tool])
    )
    if not done:
        return ""
    named = "; ".join(list(done)[:_MOST_NAMED])
    more = f"; and {len(done) - _MOST_NAMED} more" if len(done) > _MOST_NAMED else ""
    return f" Done before it ended: {named}{more}."


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 3] + "..."
