"""The three start-up checks (M2a brief, section 5). `loopd` refuses to start unless all pass.

1. `props`: the server is the one the config describes. From /props: the SHA-256 (hex) of
   `chat_template`, the per-slot `n_ctx` and `total_slots` equal the config's `[expect]` values.
2. `tool_call`: tool calls parse. One tool and a fixed prompt from `[selftest]` (with its optional
   assistant prefill, tool_choice, stop, parallel_tool_calls and temperature); the completion must
   call that tool with arguments that are a JSON object, and finish with `tool_calls`.
3. `cache`: turn 2 hits the cache. A two-turn exchange (the first prompt, its completion appended
   as the assistant message, the second prompt); `cache_outcome` for turn 2 must not be a loss.
   Both turns carry the `[selftest]` tool (with tool_choice "none"), as a session's requests
   carry their tools: that makes turn 1 long enough for the 64-token rule to be able to show a
   loss. A turn 1 that left 64 tokens or fewer in the slot fails as inconclusive.

Every check runs on the main slot (the first of `[inference] slots`), with thinking off and a
small `max_tokens`, so the whole test costs well under the brief's 1,000 tokens of generation.
The judging is pure: `judge_props`, `judge_tool_call` and `judge_cache` take what the server
answered and return a `CheckResult`. `iter_selftest` is the thin I/O shell around them: it asks
the client and yields one result per check as soon as it is known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson

from boxmaker.loopd.config import Config, ExpectConfig, SelftestConfig
from boxmaker.loopd.llama.errors import ConnectFailed, InferError
from boxmaker.loopd.llama.info import (
    CACHE_LOSS_SLACK_TOKENS,
    CacheMiss,
    Props,
    cache_outcome,
    template_sha256,
)
from boxmaker.loopd.llama.types import ChatEvent, ChatRequest, Completion, FinishReason
from boxmaker.loopd.turn.records import assistant_message
from boxmaker.proto import (
    AssistantMessage,
    ChatMessage,
    ToolSchema,
    UserMessage,
    load_json_object,
)

PROPS: Final = "props"
TOOL_CALL: Final = "tool_call"
CACHE: Final = "cache"
CHECKS: Final = (PROPS, TOOL_CALL, CACHE)

# Backstops on generation, so a model that will not stop cannot make the self-test slow. A tool
# call with small arguments fits easily (the local model's takes 32 tokens); the cache turns only
# need some completion to append, whatever its length.
TOOL_CALL_MAX_TOKENS: Final = 256
CACHE_TURN_MAX_TOKENS: Final = 64
# How much of a completion's text or a call's arguments a message quotes.
SHOWN_CHARS: Final = 120


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's outcome: `found` says what the server did, `expected` what the config wants."""

    check: str  # one of CHECKS
    ok: bool
    found: str
    expected: str

    def line(self) -> str:
        """The line `loopd selftest` prints: `ok` or `FAILED`, the check, what was found."""
        if self.ok:
            return f"ok      {self.check}: {self.found}"
        return f"FAILED  {self.check}: {self.found} (expected {self.expected})"


class SelftestClient(Protocol):
    """What the checks need of `llama.client.Client`."""

    def props(self) -> Props: ...

    def chat_with_retry(
        self,
        req: ChatRequest,
        on_event: Callable[[ChatEvent], None],
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> Completion: ...


# ---- the judges (pure) -------------------------------------------------------------------------


def judge_props(props: Props, expect: ExpectConfig) -> CheckResult:
    """Check 1: every `[expect]` value against /props, each mismatch named with both values."""
    found = {
        "chat_template_sha256": template_sha256(props.chat_template),
        "n_ctx": props.n_ctx,
        "total_slots": props.total_slots,
    }
    wanted = {
        "chat_template_sha256": expect.chat_template_sha256,
        "n_ctx": expect.n_ctx,
        "total_slots": expect.total_slots,
    }
    wrong = [
        f"{key} is {found[key]}, expected {wanted[key]}"
        for key in found
        if found[key] != wanted[key]
    ]
    expected = ", ".join(f"{key} {value}" for key, value in wanted.items())
    if wrong:
        return CheckResult(
            PROPS, False, "/props differs from [expect]: " + "; ".join(wrong), expected
        )
    return CheckResult(PROPS, True, ", ".join(f"{k} {v}" for k, v in found.items()), expected)


def _shown(text: str) -> str:
    quoted = orjson.dumps(text).decode()
    return quoted if len(quoted) <= SHOWN_CHARS else quoted[: SHOWN_CHARS - 3] + '..."'


def judge_tool_call(completion: Completion, tool_name: str) -> CheckResult:
    """Check 2: a call of `tool_name` whose arguments are a JSON object, and finish `tool_calls`.

    Every call's arguments must parse (orjson): a call that a session could not run is a failure
    even next to a good one.
    """
    expected = (
        f"a call of {tool_name} with JSON-object arguments and finish_reason "
        f"{FinishReason.TOOL_CALLS}"
    )
    calls = completion.tool_calls
    problems: list[str] = []
    if completion.finish_reason != FinishReason.TOOL_CALLS:
        problems.append(f"finish_reason {completion.finish_reason}")
    if not calls:
        text = f"content {_shown(completion.content)}" if completion.content else "no content"
        problems.append(f"no tool call ({text})")
    elif not any(call.name == tool_name for call in calls):
        problems.append(f"no call of {tool_name} (calls: {', '.join(c.name for c in calls)})")
    for call in calls:
        try:
            load_json_object(call.arguments, f"{call.name}'s argument string", ValueError)
        except ValueError as exc:
            problems.append(f"{exc}: {_shown(call.arguments)}")
    if problems:
        return CheckResult(TOOL_CALL, False, "; ".join(problems), expected)
    # Compact JSON, so the result stays one line whatever whitespace the model wrote.
    shown = ", ".join(f"{c.name}({_compact(c.arguments)})" for c in calls)
    return CheckResult(TOOL_CALL, True, f"finish_reason tool_calls, {shown}", expected)


def _compact(arguments: str) -> str:
    return orjson.dumps(orjson.loads(arguments)).decode()


def judge_cache(turn1: Completion, turn2: Completion) -> CheckResult:
    """Check 3: turn 2 reused (nearly) everything turn 1 left in the slot's cache.

    A loss is more than CACHE_LOSS_SLACK_TOKENS short, so a turn 1 that left no more than that
    cannot show one: such a result is inconclusive, and fails rather than passing unproven.
    """
    outcome = cache_outcome(turn1.timings, turn2.timings)
    left = turn1.timings.total
    slack = CACHE_LOSS_SLACK_TOKENS
    expected = f"turn 2 to reuse all but at most {slack} of the tokens turn 1 left"
    if left <= CACHE_LOSS_SLACK_TOKENS:
        return CheckResult(
            CACHE,
            False,
            f"inconclusive: turn 1 left only {left} tokens in the slot, and a loss is more than "
            f"{CACHE_LOSS_SLACK_TOKENS} short; make [selftest] cache_first_prompt longer",
            expected,
        )
    if isinstance(outcome, CacheMiss):
        return CheckResult(
            CACHE,
            False,
            f"cache loss: turn 2 reused {outcome.got} of the {outcome.expected} tokens turn 1 "
            "left in the slot",
            expected,
        )
    return CheckResult(
        CACHE,
        True,
        f"turn 2 reused {turn2.timings.cache_n} of the {left} tokens turn 1 left",
        expected,
    )


def failed_to_ask(check: str, err: InferError) -> CheckResult:
    """A check whose request ended in an InferError instead of an answer to judge."""
    return CheckResult(check, False, f"no answer: {err.describe()}", "an answer from the server")


# ---- the requests ------------------------------------------------------------------------------


def tool_call_request(config: Config) -> tuple[ChatRequest, dict[str, Any]]:
    """The tool-call check's request and its extra top-level fields, from `[selftest]`."""
    st: SelftestConfig = config.selftest
    messages: list[ChatMessage] = [UserMessage(st.prompt)]
    if st.prefill is not None:
        # A partial assistant message: the server continues it rather than starting a new one.
        messages.append(AssistantMessage(content=st.prefill, reasoning_content=None))
    req = ChatRequest(config.inference.slots[0], tuple(messages), (_tool(st),), thinking=False)
    extra: dict[str, Any] = {
        "max_tokens": min(config.inference.max_tokens, TOOL_CALL_MAX_TOKENS),
        "temperature": st.temperature,
        "tool_choice": st.tool_choice,
    }
    if st.stop is not None:
        extra["stop"] = list(st.stop)
    if st.parallel_tool_calls is not None:
        extra["parallel_tool_calls"] = st.parallel_tool_calls
    return req, extra


def cache_requests(
    config: Config, turn1: Completion | None = None
) -> tuple[ChatRequest, dict[str, Any]]:
    """The cache check's turn 1 (no `turn1` yet) or turn 2 (turn 1's completion appended).

    Both carry the [selftest] tool, as every session request carries its tools, but with
    tool_choice "none": the tools make the prompt long enough for the 64-token loss rule to mean
    something, and "none" keeps the answer a plain one that turn 2 can follow.
    """
    st = config.selftest
    messages: list[ChatMessage] = [UserMessage(st.cache_first_prompt)]
    if turn1 is not None:
        messages += [assistant_message(turn1), UserMessage(st.cache_second_prompt)]
    req = ChatRequest(config.inference.slots[0], tuple(messages), (_tool(st),), thinking=False)
    extra = {
        "max_tokens": min(config.inference.max_tokens, CACHE_TURN_MAX_TOKENS),
        "temperature": st.temperature,
        "tool_choice": "none",
    }
    return req, extra


def _tool(st: SelftestConfig) -> ToolSchema:
    return ToolSchema(st.tool_name, st.tool_description, st.tool_parameters)


# ---- the shell ---------------------------------------------------------------------------------


def _ignore(_event: ChatEvent) -> None:
    pass


def iter_selftest(
    config: Config,
    client: SelftestClient,
    on_event: Callable[[ChatEvent], None] = _ignore,
) -> Iterator[CheckResult]:
    """Runs the three checks in order and yields each result as soon as it is known.

    When /props cannot be reached at all (ConnectFailed), the other two checks are reported as
    not run rather than each waiting out its own retries against a socket nobody listens on.
    """
    try:
        props = client.props()
    except ConnectFailed as err:
        yield failed_to_ask(PROPS, err)
        for check in (TOOL_CALL, CACHE):
            yield CheckResult(
                check, False, "not run: the server could not be reached", "a reachable server"
            )
        return
    except InferError as err:
        yield failed_to_ask(PROPS, err)
    else:
        yield judge_props(props, config.expect)

    req, extra = tool_call_request(config)
    try:
        completion = client.chat_with_retry(req, on_event, extra=extra)
    except InferError as err:
        yield failed_to_ask(TOOL_CALL, err)
    else:
        yield judge_tool_call(completion, config.selftest.tool_name)

    try:
        req, extra = cache_requests(config)
        turn1 = client.chat_with_retry(req, on_event, extra=extra)
        req, extra = cache_requests(config, turn1)
        turn2 = client.chat_with_retry(req, on_event, extra=extra)
    except InferError as err:
        yield failed_to_ask(CACHE, err)
    else:
        yield judge_cache(turn1, turn2)
