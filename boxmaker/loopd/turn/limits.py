"""The turn loop's limits (M2b brief section 3, "Limits"), as pure decisions. [core]

| Limit                    | Config             | Default | Outcome here                       |
|--------------------------|--------------------|---------|------------------------------------|
| Tool iterations per turn | `tool_iterations`  | 8       | asking for round N+1 ends the turn |
| Repeated identical call  | `repeat_detection` | on      | not run; a second repeat ends it   |
| Tool result size         | `tool_result_cap`  | 16 KiB  | cut at a character, marked         |
| A nudge (turn.nudge)     | `nudge`            | off     | two a turn, a tool round each      |

The thinking cap is the client's (`Usage.thinking_capped`); context full is an HTTP 400 the loop
maps to `session_full`. Both live in `turn.loop`.

A batch is one completion's tool calls. The limiter judges the whole batch before any call runs,
so the parallel and the sequential runs decide the same:

- A batch past `tool_iterations` rounds runs nothing and ends the turn.
- A call whose tool name and `arguments` bytes equal an earlier call of the turn (the batch
  included) is a repeat: it is not run, and its result says so. The first repeat of a turn lets
  the model have one more completion; the batch with the second repeat runs nothing and ends the
  turn.
- Every call of a batch that runs nothing still gets a ToolResult that says why, so the log never
  holds a call without its answer (the next turn's request stays well formed).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from boxmaker.loopd.config import LoopConfig
from boxmaker.proto import ToolCall

# The marker after a cut result; the brief's text, on its own line so it never joins a word.
TRUNCATED_MARK: Final = "\n[truncated]"
# A turn ends at the repeat that brings the count to this.
REPEATS_TO_END: Final = 2


@dataclass(frozen=True, slots=True)
class LoopLimits:
    """The [loop] limits the core needs (from `config.LoopConfig`)."""

    tool_iterations: int = 8
    repeat_detection: bool = True
    tool_result_cap: int = 16_384  # bytes of UTF-8
    nudge: bool = False  # [loop] nudge: turn.nudge and turn.hold

    @classmethod
    def from_config(cls, config: LoopConfig) -> LoopLimits:
        return cls(
            config.tool_iterations, config.repeat_detection, config.tool_result_cap, config.nudge
        )


REPEATED_NOTE: Final = (
    "not run: this call repeats an earlier call of this turn (the same tool with the same "
    "arguments); its result is above. Use it, or change the arguments."
)


class Verdict(enum.Enum):
    RUN = "run"
    REPEATED = "repeated"  # not run: the same call was made earlier in the turn
    NOT_RUN = "not_run"  # not run: the batch ends the turn


@dataclass(frozen=True, slots=True)
class BatchPlan:
    verdicts: tuple[Verdict, ...]  # one per call, in call order
    ends_turn: str | None  # the turn_limit message when this batch ends the turn

    def note(self, i: int) -> str | None:
        """The ToolResult content of call `i` when it is not run, else None."""
        verdict = self.verdicts[i]
        if verdict is Verdict.REPEATED:
            return REPEATED_NOTE
        if verdict is Verdict.NOT_RUN:
            return f"not run: {self.ends_turn}"
        return None


@dataclass(slots=True)
class TurnLimiter:
    """Judges each batch of one turn against the limits; holds the turn's counts."""

    limits: LoopLimits
    rounds: int = 0  # batches judged so far
    repeats: int = 0
    _seen: set[tuple[str, str]] = field(default_factory=set)

    def spend(self) -> bool:
        """Takes one round for a nudge (turn.nudge); False when none is left."""
        if self.rounds >= self.limits.tool_iterations:
            return False
        self.rounds += 1
        return True

    def plan(self, calls: Sequence[ToolCall]) -> BatchPlan:
        n = self.limits.tool_iterations
        if self.rounds >= n:
            why = (
                f"the turn reached its limit of {n} tool round{'s' if n != 1 else ''} "
                "(tool_iterations), so it ends here."
            )
            return BatchPlan((Verdict.NOT_RUN,) * len(calls), why)
        self.rounds += 1
        verdicts = []
        for call in calls:
            key = (call.name, call.arguments)
            if self.limits.repeat_detection and key in self._seen:
                self.repeats += 1
                verdicts.append(Verdict.REPEATED)
            else:
                self._seen.add(key)
                verdicts.append(Verdict.RUN)
        if self.repeats >= REPEATS_TO_END and Verdict.REPEATED in verdicts:
            why = "a repeated tool call was repeated again (repeat_detection), so the turn ends."
            ended = tuple(v if v is Verdict.REPEATED else Verdict.NOT_RUN for v in verdicts)
            return BatchPlan(ended, why)
        return BatchPlan(tuple(verdicts), None)


def text_problem(text: str) -> str | None:
    """Why `text` cannot go into a log line (a lone surrogate), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate at index {exc.start}, which UTF-8 cannot carry"
    return None


def cap_result(content: str, cap_bytes: int) -> tuple[str, bool]:
    """`content` kept to `cap_bytes` of UTF-8, cut at a character boundary, with TRUNCATED_MARK
    after a cut. Returns the text and whether it was cut.

    Raises:
        UnicodeEncodeError: `content` holds a lone surrogate (check `text_problem` first).
    """
    data = content.encode("utf-8")
    if len(data) <= cap_bytes:
        return content, False
    end = cap_bytes
    while end > 0 and data[end] & 0xC0 == 0x80:  # a continuation byte: inside a character
        end -= 1
    return data[:end].decode("utf-8") + TRUNCATED_MARK, True
