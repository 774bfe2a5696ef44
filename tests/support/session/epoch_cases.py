"""Sessions with epochs for the tests: generated conversations written through the real store,
switched with `epoch_files.switch` at chosen points, and the checks the property test makes.

Also a child process (`python -m tests.support.session.epoch_cases <home> <session>`) that opens a
session and does one switch, for the kill -9 tests: `switch_now` is deterministic (its time,
summary and system text are fixed), so a roll-forward can be compared byte for byte with a switch
that never stopped.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from boxmaker.loopd.tools.registry import CORE_SCHEMAS
from boxmaker.loopd.turn.compact import compaction_messages
from boxmaker.proto import (
    Assistant,
    AssistantMessage,
    ChatMessage,
    ResultClass,
    ToolCall,
    ToolMessage,
    ToolResult,
    Usage,
    User,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session import epoch_files
from boxmaker.session.baseline import Baseline
from boxmaker.session.epochs import cut_index, epoch_end, next_baseline
from boxmaker.session.replay import request_messages
from boxmaker.session.store import SessionLog, SessionStore

T0 = "2026-11-30T12:00:00.000Z"
T_END = "2026-11-30T13:00:00.000Z"
SYSTEM = "You are a test."
SUMMARY = "## Goal\ntest\n## What was done\nthings\n## Decisions and facts the owner gave\n-\n"


def base() -> Baseline:
    return Baseline(SYSTEM, CORE_SCHEMAS)


# ---- generated conversations -------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    """One completion with `calls` tool calls, each answered by a result of the given size."""

    sizes: tuple[int, ...]


@dataclass(frozen=True)
class TurnPlan:
    text: str
    rounds: tuple[Round, ...]
    compact_after: tuple[bool, ...]  # after each round's results (mid-turn), one per round
    compact_before: bool  # before the user message
    keep_turns: int


turn_plans = st.builds(
    TurnPlan,
    st.text(min_size=1, max_size=40),
    st.lists(
        st.builds(Round, st.lists(st.integers(0, 3000), max_size=3).map(tuple)), max_size=3
    ).map(tuple),
    st.lists(st.booleans(), min_size=3, max_size=3).map(tuple),
    st.booleans(),
    st.integers(1, 3),
)


class Writer:
    """Appends a planned conversation to an open log, keeping each request it would have sent
    (per epoch) and each compaction request."""

    def __init__(self, log: SessionLog) -> None:
        self.log = log
        self.requests: dict[int, list[list[ChatMessage]]] = {}
        self.compactions: list[tuple[int, list[ChatMessage], list[ChatMessage]]] = []
        self.started: dict[int, bytes] = {}  # each new epoch's log as the switch wrote it
        self.n = 0

    def _complete(self, record: Assistant) -> None:
        msgs = request_messages(self.log.baseline, self.log.records)
        self.requests.setdefault(self.log.epoch, []).append(msgs)
        self.log.append(record)
        self.log.append(Usage(T0, 0, 10, 5, 0, False))

    def compact(self, keep_turns: int) -> bool:
        log = self.log
        keep_from = cut_index(log.records, keep_turns)
        if keep_from is None:
            return False
        last = self.requests.get(log.epoch, [[]])[-1]
        self.compactions.append((log.epoch, last, compaction_messages(log.baseline, log.records)))
        switch_with(log, keep_from)
        self.started[log.epoch] = log.log_path.read_bytes()
        return True

    def turn(self, plan: TurnPlan) -> None:
        if plan.compact_before:
            self.compact(plan.keep_turns)
        self.log.append(User(T0, plan.text))
        for r, (rnd, after) in enumerate(zip(plan.rounds, plan.compact_after, strict=False)):
            calls = tuple(
                ToolCall(f"c{self.n}_{i}", "find_tool", '{"query":"x"}')
                for i in range(len(rnd.sizes))
            )
            self.n += 1
            self._complete(Assistant(T0, None, None, calls))
            for call, size in zip(calls, rnd.sizes, strict=True):
                untrusted = size % 5 == 1  # some, as a fetch's or a file's would be
                self.log.append(
                    ToolResult(
                        T0, self.n, call.id, "r" * size, ResultClass.PUBLIC, untrusted, False
                    )
                )
            if after and r < len(plan.rounds):
                self.compact(plan.keep_turns)
        self._complete(Assistant(T0, f"answer to {plan.text}", None, ()))


def switch_with(log: SessionLog, keep_from: int, summary: str = SUMMARY) -> None:
    new = next_baseline(SYSTEM, log.baseline, summary, log.records, keep_from, 200)
    end = epoch_end(T_END, log.epoch, summary, keep_from, new, (100, 20, 30))
    epoch_files.switch(log, end, new)


def switch_now(log: SessionLog) -> None:
    keep_from = cut_index(log.records, 1)
    assert keep_from is not None
    switch_with(log, keep_from)


# ---- the checks ----------------------------------------------------------------------------------


def thread_problem(messages: Sequence[ChatMessage]) -> str | None:
    """An orphaned call or result in a request's messages, or None."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, AssistantMessage):
            if open_calls:
                return f"calls {open_calls} unanswered before an assistant message"
            open_calls = {c.id for c in m.tool_calls}
        elif isinstance(m, ToolMessage):
            if m.tool_call_id not in open_calls:
                return f"tool message {m.tool_call_id} answers no open call"
            open_calls.discard(m.tool_call_id)
        elif open_calls:
            return f"calls {open_calls} unanswered before a {type(m).__name__}"
    return f"calls {open_calls} unanswered at the end" if open_calls else None


def epoch_records(home: Path, session: str) -> list[tuple[LogRecord, ...]]:
    path = home / "sessions" / session
    return [e.checked.records for e in epoch_files.check_chain(session, path)]


def files_of(home: Path, session: str) -> dict[str, bytes]:
    """Every file of the session (the hidden ones left out), by name."""
    path = home / "sessions" / session
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if not p.name.startswith(".")}


def prepared(home: Path, session: str) -> None:
    """A session of three plain turns, closed, ready for a switch."""
    with SessionStore(home).create(session, base(), slot=0, time=T0) as log:
        for i in range(3):
            log.append(User(T0, f"message {i}"))
            log.append(Assistant(T0, f"answer {i}", None, ()))
            log.append(Usage(T0, 0, 10, 5, 0, False))


def main(argv: list[str]) -> int:
    home, session = Path(argv[0]), argv[1]
    with SessionStore(home).open(session) as log:
        switch_now(log)
        log.append(User(T0, "after the switch"))
    print("switched", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
