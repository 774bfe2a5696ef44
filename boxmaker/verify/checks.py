"""`make verify-device`'s rules: each check's finding, PASS/FAIL/SKIP, the exit status. [core]

Every function here takes what the driver (device.py) observed, already read and parsed: exit
statuses, JSON lines, a session's log records, the captured request bodies; and returns a
`Check`. Nothing here starts a process or reads a file, so the rules are tested on their own.

SKIP is for what this model cannot show, decided from what it did: a tool turn whose completions
made no tool call at all (a small model under `tool_choice: auto` may never start one; the turn
loop never forces a call) is SKIP with that reason. A call that was made is checked fully: the
tool asked for, its ToolResult's content (the time, the file's bytes, the listing, the write) and
the answer that uses it; so a result that says the tools are unavailable is a FAIL, never a PASS.
Only a FAIL makes the exit status non-zero.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from boxmaker.loopd.llama.info import CACHE_LOSS_SLACK_TOKENS
from boxmaker.proto import (
    Assistant,
    CacheLoss,
    ToolCall,
    ToolResult,
    ToolSchema,
    Usage,
    clock_text,
)
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import call_tool_target

BASELINE_BUDGET = 3000  # tokens, by the server's tokenizer (M2b)
NO_CALL = (
    "the model made no tool call (it never starts one under tool_choice auto, and the turn loop "
    "never forces one); an instruct model whose calls llama-server parses passes this"
)


class Status(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    found: str
    expected: str

    def line(self) -> str:
        """One line: `PASS name: found (expected: ...)`."""
        return f"{self.status.value} {self.name}: {self.found} (expected: {self.expected})"


def passed(name: str, ok: bool, found: str, expected: str) -> Check:
    return Check(name, Status.PASS if ok else Status.FAIL, found, expected)


def exit_status(checks: Iterable[Check]) -> int:
    """1 when a check failed, else 0: a SKIP is not a failure."""
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def summary(checks: Sequence[Check]) -> str:
    counts = {s: sum(c.status is s for c in checks) for s in Status}
    return ", ".join(f"{counts[s]} {s.value}" for s in Status)


# --- the checks ----------------------------------------------------------------------------------


def judge_selftest(status: int, output: str) -> Check:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    shown = "; ".join(lines[-3:]) or "no output"
    return passed(
        "selftest", status == 0, f"loopd selftest exited {status}: {shown}", "exit 0: props, "
        "tool_call and cache all ok"
    )  # fmt: skip


def judge_budget(tokens: int, limit: int = BASELINE_BUDGET) -> Check:
    return passed("baseline", tokens <= limit, f"{tokens} tokens", f"at most {limit}")


def calls_of(records: Iterable[LogRecord]) -> list[tuple[str, str]]:
    """(tool name, arguments as JSON text) of every call the turn's completions made, in order."""
    out: list[tuple[str, str]] = []
    for r in records:
        if isinstance(r, Assistant):
            out.extend((c.name, c.arguments) for c in r.tool_calls)
    return out


def judge_plain_turn(name: str, done: Mapping[str, Any] | None, error: str) -> Check:
    """`done`: the turn's turn_done body, or None with `error` saying what ended it."""
    if done is None:
        return passed(name, False, f"no turn_done: {error}", "an answer")
    content = done.get("content")
    if not isinstance(content, str) or not content.strip():
        return passed(name, False, f"content {content!r}", "a non-empty answer in content")
    return passed(name, True, f"answered {_short(content)}", "a non-empty answer in content")


def judge_brokerd(tools: Sequence[ToolSchema] | None, socket: str) -> Check:
    """brokerd's answer to `list` (None: it could not be reached): the tools it grants."""
    expected = f"brokerd on {socket} lists the tools it grants"
    if tools is None:
        return passed("brokerd", False, f"no answer on {socket}", expected)
    names = [t.name for t in tools]
    return passed("brokerd", bool(names), f"lists {', '.join(names) or 'no tool'}", expected)


# A rule for one tool turn: (the wanted tool's result content, the answer) -> None when both are
# right, else what is wrong.
Rule = Callable[[str, str], "str | None"]


def judge_tool_turn(
    name: str, records: Sequence[LogRecord], done: Mapping[str, Any] | None, error: str,
    tool: str, rule: Rule, expected: str,
) -> Check:  # fmt: skip
    """A turn that should call `tool` (directly or through call_tool) and answer with its result.

    SKIP when the turn's completions made no call at all; else PASS only when `tool` was called,
    every call has its ToolResult, the turn ended with turn_done, and `rule` accepts the last
    call of `tool`'s result and the answer.
    """
    calls = paired_calls(records)
    if not calls:
        if done is None:
            return passed(name, False, f"no tool call and no turn_done: {error}", expected)
        return Check(name, Status.SKIP, NO_CALL, expected)
    names = [called_tool(c.name, c.arguments) for c, _ in calls]
    shown = f"calls {', '.join(names)}"
    if any(result is None for _, result in calls):
        return passed(name, False, f"{shown}: a call without its ToolResult", expected)
    mine = [result for (c, result), n in zip(calls, names, strict=True) if target(n) == tool]
    if not mine:
        return passed(name, False, f"{shown}: no call of {tool}", expected)
    if done is None:
        return passed(name, False, f"{shown}; no turn_done: {error}", expected)
    content, answer = mine[-1].content if mine[-1] else "", str(done.get("content") or "")
    found = f"{shown}; result {_short(content, 40)}; answer {_short(answer, 60)}"
    problem = rule(content, answer)
    if problem is not None:
        return passed(name, False, f"{found}: {problem}", expected)
    return passed(name, True, found, expected)


def paired_calls(records: Iterable[LogRecord]) -> list[tuple[ToolCall, ToolResult | None]]:
    """Every call the completions made, in order, with its ToolResult (by tool_call_id)."""
    results = {r.tool_call_id: r for r in records if isinstance(r, ToolResult)}
    return [
        (c, results.get(c.id)) for r in records if isinstance(r, Assistant) for c in r.tool_calls
    ]


def target(shown: str) -> str:
    """`echo` for `call_tool(echo)`; the name otherwise."""
    return shown[len("call_tool(") : -1] if shown.startswith("call_tool(") else shown


# --- the rules of the tool checks (device.py plants the files they name) -------------------------


def clock_rule(now: datetime, slack_s: float) -> Rule:
    """The result is an RFC 3339 time within `slack_s` of `now` and its weekday (proto's
    clock_text); the answer quotes its hour and minute (as HH:MM, or on a 12-hour clock)."""

    def rule(content: str, answer: str) -> str | None:
        stamp = content.strip().partition(", a ")[0]
        try:
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return "the result is not an RFC 3339 time"
        if when.tzinfo is None or abs((when - now).total_seconds()) > slack_s:
            return f"the result is not the time now ({now:%H:%M} UTC, within {slack_s:g} s)"
        if clock_text(when) != content.strip():
            return f"the result is not the time and its weekday ({clock_text(when)!r})"
        hour12 = when.hour % 12 or 12
        quoted = (f"{when:%H:%M}", f"{hour12}:{when:%M}")
        if not any(q in answer for q in quoted):
            return f"the answer does not quote the time ({' or '.join(quoted)})"
        return None

    return rule


def contains_rule(result_has: Sequence[str], answer_has: Sequence[str]) -> Rule:
    """The result holds each of `result_has` (the file's bytes, the listed names); the answer
    each of `answer_has` (what the owner asked for, taken from the result)."""

    def rule(content: str, answer: str) -> str | None:
        if missing := [t for t in result_has if t not in content]:
            return f"the result lacks {', '.join(map(repr, missing))}"
        if missing := [t for t in answer_has if t not in answer]:
            return f"the answer lacks {', '.join(map(repr, missing))}"
        return None

    return rule


def written_rule(want: bytes, written: Callable[[], bytes | None]) -> Rule:
    """write_file answered that it wrote, and the file holds `want` (read by `written`, after the
    turn); the answer says something."""

    def rule(content: str, answer: str) -> str | None:
        if not content.startswith("wrote "):
            return "the result is not brokerd's 'wrote ...' (denied, or an error)"
        got = written()
        if got is None:
            return "the file is not in the workspace"
        if got.strip() != want.strip():
            return f"the file holds {got[:60]!r}, not {want!r}"
        return None if answer.strip() else "no answer after the write"

    return rule


def called_tool(name: str, arguments: str) -> str:
    """`call_tool(echo)` for a call_tool call naming echo; the name otherwise."""
    target = call_tool_target(name, arguments)
    return name if target is None else f"call_tool({target})"


def judge_log(records: Sequence[LogRecord]) -> Check:
    """One Usage per completion (Assistant), no CacheLoss, a ToolResult per call."""
    assistants = sum(isinstance(r, Assistant) for r in records)
    usages = sum(isinstance(r, Usage) for r in records)
    losses = [r for r in records if isinstance(r, CacheLoss)]
    calls = sum(len(r.tool_calls) for r in records if isinstance(r, Assistant))
    results = sum(isinstance(r, ToolResult) for r in records)
    found = (
        f"{assistants} completions, {usages} Usage, {len(losses)} CacheLoss, {calls} tool calls, "
        f"{results} ToolResult"
    )
    ok = assistants == usages and assistants > 0 and not losses and calls == results
    return passed("log", ok, found, "a Usage per completion, no CacheLoss, a ToolResult per call")


def judge_resume(
    before: Sequence[LogRecord], after: Sequence[LogRecord], done: Mapping[str, Any] | None,
    error: str,
) -> Check:  # fmt: skip
    """After `supervisorctl restart loopd`: the log kept, the fourth turn's first completion hit
    the cache the last one left (within CACHE_LOSS_SLACK_TOKENS)."""
    expected = f"the log kept, a new turn, cache_n >= the last total - {CACHE_LOSS_SLACK_TOKENS}"
    if done is None:
        return passed("resume", False, f"no turn_done: {error}", expected)
    if list(after[: len(before)]) != list(before):
        return passed("resume", False, "the records before the restart changed", expected)
    last = next((r for r in reversed(before) if isinstance(r, Usage)), None)
    first = next((r for r in after[len(before) :] if isinstance(r, Usage)), None)
    if last is None or first is None:
        return passed("resume", False, "no Usage before or after the restart", expected)
    total = last.cache_n + last.prompt_n + last.predicted_n
    ok = first.cache_n >= total - CACHE_LOSS_SLACK_TOKENS
    losses = sum(isinstance(r, CacheLoss) for r in after)
    return passed(
        "resume", ok and not losses, f"cache_n {first.cache_n} of {total}, {losses} CacheLoss",
        expected,
    )  # fmt: skip


def judge_thinking_cap(status: int, lines: Sequence[Mapping[str, Any]], cap: int) -> Check:
    """`loopd complete` with thinking on and `thinking_cap = cap`: its JSON lines."""
    expected = f"a thinking_capped event at {cap} tokens, then the completion"
    capped = [e for e in lines if e.get("type") == "thinking_capped"]
    done = [e for e in lines if e.get("type") == "completion"]
    reasoning = sum(1 for e in lines if e.get("type") == "reasoning")
    if status != 0 or not done:
        last = lines[-1] if lines else {}
        return passed(
            "thinking_cap", False, f"exit {status}, last line {_short(str(last))}", expected
        )
    if not capped:
        if reasoning == 0:
            why = "the model did not reason at all (no reasoning_content): a reasoning template"
            return Check("thinking_cap", Status.SKIP, f"{why} and model show this", expected)
        return passed(
            "thinking_cap", False, f"{reasoning} reasoning events, never capped", expected
        )
    ok = bool(done[-1].get("thinking_capped"))
    return passed("thinking_cap", ok, f"capped at {capped[0].get('tokens')} tokens", expected)


def judge_survives_proxy_kill(
    status: int, lines: Sequence[Mapping[str, Any]], killed: bool
) -> Check:
    """`loopd complete` whose inferproxy was killed (SIGKILL) mid-stream and restarted."""
    expected = "the proxy killed mid-stream, a retrying event, then the completion"
    if not killed:
        return passed("proxy_kill", False, "the stream ended before the proxy could be killed",
                      expected)  # fmt: skip
    retries = [e for e in lines if e.get("type") == "retrying"]
    done = [e for e in lines if e.get("type") == "completion"]
    found = f"exit {status}, {len(retries)} retrying events, {len(done)} completions"
    return passed("proxy_kill", status == 0 and bool(retries) and bool(done), found, expected)


def judge_requests(bodies: Sequence[Mapping[str, Any]]) -> Check:
    """Every captured chat request extends the one before in its conversation.

    A conversation is the requests with the same first two messages (the system prompt and the
    session's first user message: each tool check has a session of its own) and tools; within it
    each request's messages start with the previous request's messages (a retry repeats them),
    except that a request may start it over from its first request (the self-test, run at every
    start of loopd).
    """
    expected = "each request's messages start with the previous one's, per conversation"
    if not bodies:
        return passed("requests", False, "no chat request captured", expected)
    chains: dict[str, tuple[list[Any], list[Any]]] = {}  # key -> (first messages, last messages)
    for i, body in enumerate(bodies):
        messages = list(body.get("messages") or [])
        key = repr((messages[:2], body.get("tools")))
        if key not in chains:
            chains[key] = (messages, messages)
            continue
        first, last = chains[key]
        if messages[: len(last)] != last and messages != first:
            return passed(
                "requests", False,
                f"request {i + 1} of {len(bodies)} does not extend the one before "
                f"({len(last)} messages, then {len(messages)})", expected,
            )  # fmt: skip
        chains[key] = (first, messages)
    return passed(
        "requests", True, f"{len(bodies)} requests in {len(chains)} conversations", expected
    )


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[:n] + "...")
