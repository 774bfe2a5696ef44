"""What became of a tool call, in one word, for the channel's tool_result (issue 39 item 6). [core]

Read from what loopd recorded: its own note for a call it answered itself, or brokerd's
`error: denied: ...` / `error: cancelled: ...` texts (brokerd/broker.py).
"""

from __future__ import annotations

from boxmaker.loopd.tools.registry import Answer, Resolution
from boxmaker.proto import ToolResponse

_DENIED = ("(no)", "(empty)", "(closed)")  # the owner's answers brokerd denies on


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
