"""When to compact, the instruction, the kept tail, and the summary attempt (issue 21). [core]

- `due`: after a completion, when `cache_n + prompt_n + predicted_n` (the server's own counts)
  reaches `[compact] at` of the slot's context. The turn loop asks only where every tool call has
  its result: before a turn's user message, or between two iterations (not counted as one).
- `summarise`: the summary attempt as a generator of `ChatRequest`s. Its first request is the
  epoch's last request (same baseline, same replayed log, same tools) plus `INSTRUCTION`, so the
  server reads only the instruction. An answer that calls a tool gets the call refused (one tool
  message per call) and one more request, which extends the first; a second tool call, an empty
  answer, an error, nothing to fold or a cut below `[compact] min_cut` is a `Failed`, never a fold
  into nothing. It returns `Folded`: the `epoch_end` and the next baseline (`session.epochs`).
- The kept tail is the last `keep_turns` whole turns (`epochs.cut_index`): a cut at a turn's start
  can never fall between a tool call and its result.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.types import ChatRequest, Completion
from boxmaker.loopd.tools.registry import folded_tools
from boxmaker.proto import (
    Assistant,
    AssistantMessage,
    ChatMessage,
    EpochEnd,
    ToolMessage,
    ToolResult,
    Usage,
    User,
    UserMessage,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session.baseline import BASELINE_MAX_BYTES, Baseline, budget_text
from boxmaker.session.epochs import CUT_MARK, cut_index, epoch_end, next_baseline
from boxmaker.session.replay import request_messages

INSTRUCTION = (
    "[loopd: compaction] The conversation is about to be folded to save room: the turns above "
    "will be replaced by the summary you write now, and the last turns stay as they are. Do not "
    "call any tool. Write the summary in plain text under exactly these four headings, each on "
    "its own line:\n"
    "## Goal\n"
    "## What was done\n"
    "## Decisions and facts the owner gave\n"
    "## Open questions and next steps\n"
    "If the system message has a section 'Earlier in this conversation', refine that summary "
    "with what happened since: keep what still holds, drop what no longer matters. Be brief and "
    "exact: names, numbers, paths and the owner's wishes as stated."
)
REFUSED = (
    "[loopd: compaction] not run: no tool is run while the summary is written. Write the "
    "summary now, in plain text, under the four headings."
)


@dataclass(frozen=True, slots=True)
class Room:
    """The slot's context (`[expect] n_ctx`) and the share of it a turn may fill (`[compact]
    at`): the one place that decides whether the slot is full, so the fold is due, and whether a
    message fits (issue 35.3). The turn loop, the compaction and the runner's message check all
    ask it; nothing else multiplies `at` by `n_ctx`."""

    n_ctx: int
    at: float

    @property
    def limit(self) -> int:
        """The most tokens a turn may fill: `at` of the context, rounded down."""
        return int(self.n_ctx * self.at)

    def full(self, tokens: int) -> bool:
        """Whether `tokens` in the slot reach `at` of it: the session folds before it goes on."""
        return tokens >= self.at * self.n_ctx

    def left(self, taken: int) -> int:
        """The tokens a message may have beside `taken` (the system text and tools)."""
        return max(self.limit - taken, 0)


@dataclass(frozen=True, slots=True)
class Settings:
    """The [compact] keys the core reads (their defaults are config.py's alone), and the room."""

    room: Room
    keep_turns: int
    min_cut: float
    owner_chars: int
    summary_tokens: int  # min([compact] summary_tokens, [inference] max_tokens)


# A summary is kept to this many characters a token of its budget (issue 29.1): a server that
# ignores max_tokens streams until [inference] max_tokens, and that text would go into every
# request of the next epoch. Four is above what a tokenizer averages on prose.
SUMMARY_CHARS_PER_TOKEN = 4


def bounded_summary(text: str, tokens: int) -> str:
    """`text` kept to `tokens` * SUMMARY_CHARS_PER_TOKEN characters, CUT_MARK after a cut."""
    limit = tokens * SUMMARY_CHARS_PER_TOKEN
    return text if len(text) <= limit else text[: max(limit - len(CUT_MARK), 0)] + CUT_MARK


@dataclass(frozen=True, slots=True)
class Folded:
    end: EpochEnd
    baseline: Baseline
    before: int  # the context the last completion left, in the server's tokens
    cut: float  # the share of the context the fold removes (estimated by characters)


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str


def used(usage: Usage | None) -> int:
    """The tokens the completion left in the slot: cache_n + prompt_n + predicted_n."""
    return 0 if usage is None else usage.cache_n + usage.prompt_n + usage.predicted_n


def due(usage: Usage | None, settings: Settings, more: int = 0) -> bool:
    """Whether the last completion filled the slot past `[compact] at`; with `more`, whether
    it would with that many more tokens (a message not appended yet)."""
    return settings.room.full(used(usage) + more)


def compaction_messages(baseline: Baseline, records: Sequence[LogRecord]) -> list[ChatMessage]:
    """The epoch's next request's messages, then the fixed instruction."""
    return [*request_messages(baseline, records), UserMessage(INSTRUCTION)]


def _size(baseline: Baseline, messages: Sequence[ChatMessage]) -> int:
    n = len(budget_text(baseline))
    for m in messages:
        if isinstance(m, UserMessage | ToolMessage):
            n += len(m.content)
        elif isinstance(m, AssistantMessage):
            n += len(m.content or "") + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
    return n


def cut_share(old: Baseline, records: Sequence[LogRecord], new: Baseline, keep_from: int) -> float:
    """The share of the context a fold removes, by characters of the system text, the tools and
    the messages (a tokenizer-free estimate; the `compacted` event gives the server's counts)."""
    before = _size(old, request_messages(old, records)[1:])
    after = _size(new, request_messages(new, records[keep_from:])[1:])
    return 1 - after / before if before else 0.0


def _bare(system_now: str, baseline: Baseline) -> Baseline:
    """The next baseline with an empty summary and no owner text: the least a fold can leave."""
    return Baseline(system_now, folded_tools(baseline.tools))


def would_ask(baseline: Baseline, records: Sequence[LogRecord], settings: Settings) -> bool:
    """Whether `summarise` would ask the model at all: there is a turn to fold, and even an
    empty summary would cut `min_cut` (the epoch's own system text stands for system.md's)."""
    keep_from = cut_index(records, settings.keep_turns)
    if keep_from is None:
        return False
    return cut_share(baseline, records, _bare(baseline.system, baseline), keep_from) >= (
        settings.min_cut
    )


# Once max_attempts are spent, one more attempt each time the context has grown by this share
# (or min_cut, if larger) since the last: a fold that failed may pass on a longer epoch, and the
# growth bounds how often the model is asked (issue 29.5).
RETRY_GROWTH = 0.1


def attempt_refused(
    baseline: Baseline, records: Sequence[LogRecord], settings: Settings, max_attempts: int
) -> str | None:
    """Why an automatic fold may not ask the model now, or None (issue 29.5).

    The attempts are counted from the epoch's log alone, so a worker's restart or a loopd's
    changes nothing: an attempt was made at each point where the turn loop asks (before a `user`
    record, or before an answer that follows tool results) with the last completion past
    `[compact] at` and `would_ask` true there. One that asked nothing (nothing to fold, too
    small a cut) is not counted: it is tried again for free as the epoch grows."""
    growth = max(RETRY_GROWTH, settings.min_cut)
    count, last, usage = 0, 0, None
    for p, record in enumerate(records):
        point = type(record) is User or (
            type(record) is Assistant and p > 0 and type(records[p - 1]) is ToolResult
        )
        allowed = count < max_attempts or used(usage) >= last * (1 + growth)
        asks = point and allowed and due(usage, settings)
        if asks and would_ask(baseline, records[:p], settings):
            count, last = count + 1, used(usage)
        if type(record) is Usage:
            usage = record
    if count < max_attempts or used(usage) >= last * (1 + growth):
        return None
    return (
        f"[compact] max_attempts ({max_attempts}) already tried in this epoch; tried again once "
        f"the context grows {growth:.0%} past {last} tokens"
    )


def _too_little(cut: float, settings: Settings) -> Failed:
    return Failed(
        f"the fold would cut only {max(cut, 0):.0%} of the context, under [compact] min_cut "
        f"{settings.min_cut:.0%} (the kept turns, the summary or the owner's words are too long)"
    )


def summarise(
    *,
    baseline: Baseline,
    records: Sequence[LogRecord],
    slot: int,
    epoch: int,
    system_now: str,
    settings: Settings,
    now: str,
    upto: int | None = None,
) -> Generator[ChatRequest, Completion | InferError, Folded | Failed]:
    """The summary attempt: yields each request, gets its Completion (or InferError) back.

    Args:
        baseline, records: the epoch's baseline and its whole log.
        slot: the session's slot.
        epoch: the epoch being closed.
        system_now: system.md and memory/core.md as they are now (the next baseline's start).
        settings: the [compact] keys and the slot's context.
        now: the time of the epoch_end record.
        upto: the records the summary request replays (None: all).
    """
    keep_from = cut_index(records, settings.keep_turns)
    if keep_from is None:
        turns = sum(1 for m in request_messages(baseline, records) if isinstance(m, UserMessage))
        return Failed(
            f"nothing to fold: the epoch holds {turns} turns and keep_turns is "
            f"{settings.keep_turns}"
        )
    least = cut_share(baseline, records, _bare(system_now, baseline), keep_from)
    if least < settings.min_cut:  # not even an empty summary would cut enough: ask nothing
        return _too_little(least, settings)
    messages = compaction_messages(baseline, records[:upto])
    got = yield ChatRequest(slot, tuple(messages), baseline.tools, thinking=False)
    if isinstance(got, Completion) and got.tool_calls:
        messages.append(AssistantMessage(got.content, got.reasoning_content, got.tool_calls))
        messages.extend(ToolMessage(c.id, REFUSED) for c in got.tool_calls)
        got = yield ChatRequest(slot, tuple(messages), baseline.tools, thinking=False)
        if isinstance(got, Completion) and got.tool_calls:
            return Failed("the model called a tool instead of writing the summary, twice")
    if isinstance(got, InferError):
        return Failed(f"the summary request failed: {got.describe()}")
    summary = bounded_summary((got.content or "").strip(), settings.summary_tokens)
    if not summary:
        return Failed("the model's summary was empty")
    tools = Baseline(baseline.system, folded_tools(baseline.tools))
    new = next_baseline(system_now, tools, summary, records, keep_from, settings.owner_chars)
    if (size := len(new.to_bytes())) > BASELINE_MAX_BYTES:  # it could not be read back
        return Failed(
            f"the next baseline would be {size:,} bytes, over its bound of "
            f"{BASELINE_MAX_BYTES:,} (system.md and memory/core.md, the summary and the "
            "owner's words: lower [compact] owner_chars)"
        )
    cut = cut_share(baseline, records, new, keep_from)
    if cut < settings.min_cut:
        return _too_little(cut, settings)
    t = got.timings
    end = epoch_end(now, epoch, summary, keep_from, new, (t.cache_n, t.prompt_n, t.predicted_n))
    before = t.cache_n + t.prompt_n
    return Folded(end, new, before, cut)


# ---- the turn loop's side: the action and what comes back --------------------------------------


@dataclass(frozen=True, slots=True)
class Compact:
    """The turn loop's action: fold the epoch now. `upto` is how many records the summary
    request replays (None: all; after a context-full answer, the records before the turn, a
    request the server took). The runner sends back `Switched` or `Failed`."""

    reason: str
    upto: int | None = None


@dataclass(frozen=True, slots=True)
class Switched:
    """The session is in its next epoch: its baseline and its log's records."""

    baseline: Baseline
    records: tuple[LogRecord, ...]
    ended: EpochEnd  # the record that closed the epoch before


def full_message(detail: str, failure: str | None) -> str:
    """The session_full message after a context-full answer, with what compaction did."""
    if failure is None:
        what = "compaction is off ([compact] enabled = false)"
    else:
        what = f"compaction could not make room: {failure}"
    return (
        f"the conversation no longer fits the model's context (the server answered {detail}); "
        f"{what}. Nothing of the answer was recorded. Send `/compact`, lower [compact] "
        "keep_turns, or start a new session; if a message of yours no answer followed is too "
        "long, `bxctl repair --unanswered <session>` takes it out of the log (kept beside it)"
    )
