"""The self-test's judges (pure), its requests, and its shell against a socket nobody listens on.

The checks against a real server are in llama/test_real_server.py; these need none.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from boxmaker.loopd.config import Config, load_config, parse_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.info import Props, template_sha256
from boxmaker.loopd.llama.types import Completion, FinishReason
from boxmaker.loopd.selftest import (
    CACHE,
    PROPS,
    TOOL_CALL,
    CheckResult,
    cache_requests,
    iter_selftest,
    judge_cache,
    judge_props,
    judge_tool_call,
    tool_call_request,
)
from boxmaker.proto import AssistantMessage, Timings, ToolCall, UserMessage

REPO = Path(__file__).resolve().parents[2]
LOCAL_PROFILE = REPO / "conf" / "loopd.local.toml"
TEMPLATE = REPO / "conf" / "templates" / "chatml-tools.jinja"

TEMPLATE_TEXT = "{{ messages }}"
SHA = hashlib.sha256(TEMPLATE_TEXT.encode()).hexdigest()


def config_text(socket: str = "infer.sock", selftest: str = "") -> str:
    return (
        f'[inference]\nsocket = "{socket}"\nmodel = "m"\nmax_tokens = 100\n'
        f'[expect]\nchat_template_sha256 = "{SHA}"\nn_ctx = 2048\ntotal_slots = 2\n'
        f"[selftest]\n{selftest}"
    )


def config(selftest: str = "", socket: str = "infer.sock", base: Path = Path("/x")) -> Config:
    return parse_config(config_text(socket, selftest), "test.toml", base)


TIMINGS = Timings(0, 10, 5)


def completion(
    content: str | None = None,
    calls: tuple[ToolCall, ...] = (),
    finish: FinishReason = FinishReason.STOP,
    timings: Timings = TIMINGS,
) -> Completion:
    return Completion("chatcmpl-1", content, None, calls, finish, timings, 0, False)


# ---- check 1: /props ---------------------------------------------------------------------------


def test_template_sha256_is_the_hex_digest_of_the_utf8_text() -> None:
    assert template_sha256("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert template_sha256("é") == hashlib.sha256("é".encode()).hexdigest()


def test_props_matching_expect_passes_and_shows_what_it_found() -> None:
    result = judge_props(Props(TEMPLATE_TEXT, 2, 2048), config().expect)
    assert result.ok
    assert result.found == f"chat_template_sha256 {SHA}, n_ctx 2048, total_slots 2"


@pytest.mark.parametrize(
    ("props", "named"),
    [
        (
            Props("other", 2, 2048),
            f"chat_template_sha256 is {template_sha256('other')}, expected {SHA}",
        ),
        (Props(TEMPLATE_TEXT, 2, 4096), "n_ctx is 4096, expected 2048"),
        (Props(TEMPLATE_TEXT, 1, 2048), "total_slots is 1, expected 2"),
    ],
    ids=["chat_template_sha256", "n_ctx", "total_slots"],
)
def test_each_props_mismatch_is_named_with_both_values(props: Props, named: str) -> None:
    result = judge_props(props, config().expect)
    assert not result.ok
    assert result.found == f"/props differs from [expect]: {named}"


def test_every_props_mismatch_is_reported_at_once() -> None:
    result = judge_props(Props("other", 4, 512), config().expect)
    assert not result.ok
    for key in ("chat_template_sha256 is", "n_ctx is 512", "total_slots is 4"):
        assert key in result.found


def test_the_local_profile_expects_the_template_it_ships() -> None:
    # llama-server's /props chat_template is the file without its final newline (measured in
    # recordings/props.http), so this is the hash `loopd selftest` will find.
    profile = load_config(LOCAL_PROFILE, env={})
    served = TEMPLATE.read_text(encoding="utf-8").rstrip("\n")
    assert profile.expect.chat_template_sha256 == template_sha256(served)


# ---- check 2: tool calls parse -----------------------------------------------------------------

GOOD_CALL = ToolCall("c1", "get_time", '{\n  "timezone": "Europe/Paris"\n}')


def test_a_tool_call_with_json_object_arguments_passes_on_one_line() -> None:
    result = judge_tool_call(completion(None, (GOOD_CALL,), FinishReason.TOOL_CALLS), "get_time")
    assert result.ok
    assert result.found == 'finish_reason tool_calls, get_time({"timezone":"Europe/Paris"})'
    assert "\n" not in result.line()


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        (
            completion("It is noon.", (), FinishReason.STOP),
            'finish_reason stop; no tool call (content "It is noon.")',
        ),
        (completion(None, (), FinishReason.STOP), "finish_reason stop; no tool call (no content)"),
        (
            completion(None, (ToolCall("c1", "get_weather", "{}"),), FinishReason.TOOL_CALLS),
            "no call of get_time (calls: get_weather)",
        ),
        (completion(None, (GOOD_CALL,), FinishReason.LENGTH), "finish_reason length"),
        (
            completion(
                None, (ToolCall("c1", "get_time", '{"timezone": "Eu'),), FinishReason.TOOL_CALLS
            ),
            "get_time's argument string is not JSON (",
        ),
        (
            completion(
                None, (ToolCall("c1", "get_time", '["Europe/Paris"]'),), FinishReason.TOOL_CALLS
            ),
            'get_time\'s argument string is not a JSON object (got array): "[\\"Europe/Paris\\"]"',
        ),
        (
            completion(
                None, (GOOD_CALL, ToolCall("c2", "get_time", "nope")), FinishReason.TOOL_CALLS
            ),
            "get_time's argument string is not JSON (",
        ),
    ],
    ids=["prose", "nothing", "other_tool", "length", "cut_json", "array", "one_of_two_bad"],
)
def test_a_tool_call_that_a_session_could_not_run_fails(answer: Completion, found: str) -> None:
    result = judge_tool_call(answer, "get_time")
    assert not result.ok
    assert found in result.found, result.found
    assert result.line().startswith("FAILED  tool_call: ")
    assert "expected a call of get_time with JSON-object arguments" in result.line()


def test_long_content_is_cut_in_the_message() -> None:
    result = judge_tool_call(completion("x" * 1000), "get_time")
    assert len(result.found) < 200
    assert result.found.endswith('...")')


# ---- check 3: turn 2 hits the cache ------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn1", "cache_n", "ok"),
    [
        (Timings(0, 200, 30), 229, True),  # everything but the re-evaluated last token
        (Timings(0, 60, 5), 1, True),  # 65 left, 64 short: the rule's edge, still a hit
        (Timings(0, 60, 5), 0, False),  # 65 short: a loss
        (Timings(100, 100, 30), 12, False),
    ],
)
def test_turn_2_is_judged_by_the_64_token_rule(turn1: Timings, cache_n: int, ok: bool) -> None:
    result = judge_cache(completion(timings=turn1), completion(timings=Timings(cache_n, 40, 9)))
    assert result.ok is ok
    if ok:
        assert result.found == f"turn 2 reused {cache_n} of the {turn1.total} tokens turn 1 left"
    else:
        assert result.found == (
            f"cache loss: turn 2 reused {cache_n} of the {turn1.total} tokens turn 1 left in "
            "the slot"
        )


def test_a_turn_1_too_short_to_show_a_loss_is_inconclusive() -> None:
    result = judge_cache(
        completion(timings=Timings(0, 50, 14)), completion(timings=Timings(0, 80, 5))
    )
    assert not result.ok
    assert result.found.startswith("inconclusive: turn 1 left only 64 tokens")
    assert "cache_first_prompt" in result.found


def test_check_result_lines() -> None:
    assert CheckResult(PROPS, True, "fine", "x").line() == "ok      props: fine"
    assert CheckResult(CACHE, False, "bad", "good").line() == "FAILED  cache: bad (expected good)"


# ---- the requests ------------------------------------------------------------------------------


def test_the_local_profile_forces_the_tool_call() -> None:
    profile = load_config(LOCAL_PROFILE, env={})
    req, extra = tool_call_request(profile)
    st = profile.selftest
    assert req.slot == profile.inference.slots[0]
    assert req.messages == (UserMessage(st.prompt), AssistantMessage("<tool_call>", None))
    assert [t.name for t in req.tools] == [st.tool_name]
    assert req.tools[0].parameters == st.tool_parameters
    assert not req.thinking
    assert extra == {
        "max_tokens": min(256, profile.inference.max_tokens),
        "temperature": 0.0,
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }


def test_the_default_selftest_forces_nothing_and_stop_is_sent_when_set() -> None:
    req, extra = tool_call_request(config())
    assert len(req.messages) == 1  # no prefill
    assert extra == {"max_tokens": 100, "temperature": 0.0, "tool_choice": "auto"}
    _, extra = tool_call_request(config('stop = ["</tool_call>"]\n'))
    assert extra["stop"] == ["</tool_call>"]


def test_the_request_bytes_end_with_the_prefill_and_carry_the_extra_fields() -> None:
    cfg = load_config(LOCAL_PROFILE, env={})
    req, extra = tool_call_request(cfg)
    body = orjson.loads(Client(cfg.inference).request_body(req, extra=extra))
    assert body["messages"][-1] == {"role": "assistant", "content": "<tool_call>"}
    assert body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.0
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["tools"][0]["function"]["name"] == "get_time"


def test_cache_turn_2_is_turn_1_with_its_answer_and_the_second_prompt() -> None:
    cfg = config()
    turn1_req, extra = cache_requests(cfg)
    answer = Completion(
        "c", "Red, yellow, blue.", "thought", (), FinishReason.STOP, Timings(0, 30, 6), 2, False
    )
    turn2_req, extra2 = cache_requests(cfg, answer)
    assert turn2_req.messages == (
        *turn1_req.messages,
        AssistantMessage("Red, yellow, blue.", "thought"),
        UserMessage(cfg.selftest.cache_second_prompt),
    )
    assert turn1_req.tools == turn2_req.tools
    assert len(turn1_req.tools) == 1
    assert extra == extra2 == {"max_tokens": 64, "temperature": 0.0, "tool_choice": "none"}


# ---- the shell ---------------------------------------------------------------------------------


def test_an_unreachable_server_fails_props_and_skips_the_rest(tmp_path: Path) -> None:
    cfg = config(socket="nobody.sock", base=tmp_path)
    results = list(iter_selftest(cfg, Client(cfg.inference)))
    assert [r.check for r in results] == [PROPS, TOOL_CALL, CACHE]
    assert not any(r.ok for r in results)
    assert results[0].found.startswith("no answer: connect: ")
    assert str(tmp_path / "nobody.sock") in results[0].found
    assert all(r.found == "not run: the server could not be reached" for r in results[1:])
