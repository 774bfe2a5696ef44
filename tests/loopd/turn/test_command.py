"""`loopd turn`: one turn of a session in this process, events and outcome as JSON lines.

In-process through `cli.main` against the fake server where nothing needs a second process; as a
real subprocess where the point is one: a session whose lock another process holds.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from boxmaker.proto import ToolResult
from boxmaker.session.store import SessionStore
from tests.support.loopd.turn_command import RUN_BOUND_S, lines, run, write_config
from tests.support.procs import python_module
from tests.support.replies import json_reply
from tests.support.turn import SYSTEM, Env, calls, new_session, say


def test_new_session_then_resume(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(write_config(env))
    env.fake.on("POST", "/tokenize", json_reply(200, {"tokens": list(range(50))}))
    env.model.load([calls(("clock", {})), say("It is noon.")])
    status, out, err = run(
        capsys, "--config", config, "--session", "cli-1", "--new", "--say", "Time?"
    )
    assert (status, err) == (0, "")
    assert [o["type"] for o in out if o["type"] != "content"] == [
        "tool_call_started",
        "tool_result",
        "turn_done",
    ]
    assert out[-1]["content"] == "It is noon."
    assert set(out[-1]["usage"]) == {
        "cache_n", "prompt_n", "predicted_n", "reasoning_tokens", "thinking_capped",
    }  # fmt: skip
    # The baseline is system.md and the core tools, and its budget was asked of the server.
    (tokenize,) = env.fake.requests("/tokenize")
    assert tokenize.json["content"].startswith(SYSTEM + "\n\n")
    env.model.load([say("Again.")])
    status, out, _ = run(capsys, "--config", config, "--session", "cli-1", "--say", "More?",
                         "--no-thinking")  # fmt: skip
    assert status == 0
    assert out[-1]["content"] == "Again."
    first, _, third = (r.json for r in env.fake.requests("/v1/chat/completions"))
    assert third["chat_template_kwargs"] == {"enable_thinking": False}
    assert third["messages"][: len(first["messages"])] == first["messages"]
    with SessionStore(env.home).open("cli-1") as log:
        assert [r.content for r in log.records if isinstance(r, ToolResult)]


@pytest.mark.parametrize(
    ("loop", "flags", "sent"),
    [
        ({}, (), True),  # [loop] thinking's default
        ({"thinking": False}, (), False),  # the config's, when the turn does not say
        ({"thinking": False}, ("--thinking",), True),
        ({"thinking": True}, ("--no-thinking",), False),
    ],
)
def test_thinking_is_the_flag_else_the_config(
    env: Env, capsys: pytest.CaptureFixture[str], loop: dict[str, Any], flags: tuple[str, ...],
    sent: bool,
) -> None:  # fmt: skip
    config = str(write_config(env, **loop))
    env.fake.on("POST", "/tokenize", json_reply(200, {"tokens": list(range(50))}))
    env.model.load([say("Hi.")])
    status, _, err = run(capsys, "--config", config, "--session", "t", "--new", "--say", "Hi",
                         *flags)  # fmt: skip
    assert (status, err) == (0, "")
    (request,) = (r.json for r in env.fake.requests("/v1/chat/completions"))
    assert request["chat_template_kwargs"] == {"enable_thinking": sent}


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--session", "../x", "--new"], "bad_request"),
        (["--session", "", "--new"], "bad_request"),
        (["--session", "nobody"], "no_such_session"),
        (["--session", "s1", "--new"], "session_exists"),
    ],
)
def test_session_refusals(
    env: Env, capsys: pytest.CaptureFixture[str], argv: list[str], code: str
) -> None:
    config = str(write_config(env))
    new_session(env.home).close()  # "s1" exists
    before = sorted(p.name for p in (env.home / "sessions").iterdir())
    status, out, err = run(capsys, "--config", config, *argv, "--say", "Hi")
    assert status == 1
    assert out == [{"type": "error", "code": code, "message": out[0]["message"]}]
    assert err.startswith(f"loopd turn: {code}: ")
    assert sorted(p.name for p in (env.home / "sessions").iterdir()) == before
    assert env.fake.requests() == []


def test_a_baseline_over_budget_creates_nothing(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(env))
    env.fake.on("POST", "/tokenize", json_reply(200, {"tokens": list(range(3001))}))
    status, out, _ = run(capsys, "--config", config, "--session", "big", "--new", "--say", "Hi")
    assert status == 1
    assert "3001 tokens, over the limit of 3000" in out[-1]["message"]
    assert not SessionStore(env.home).exists("big")


def test_a_turn_limit_is_an_error_line(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(write_config(env, tool_iterations=1))
    new_session(env.home, "lim").close()
    env.model.load([calls(("clock", {}), prefix="a"), calls(("clock", {"x": 1}), prefix="b")])
    status, out, err = run(capsys, "--config", config, "--session", "lim", "--say", "Loop")
    assert status == 1
    assert out[-1]["type"] == "error"
    assert out[-1]["code"] == "turn_limit"
    assert "turn_limit" in err


def test_a_session_open_in_another_process_is_busy_and_untouched(env: Env) -> None:
    config = write_config(env)
    with new_session(env.home, "held") as log:  # this process holds the lock
        data = log.log_path.read_bytes()
        done = subprocess.run(
            python_module(
                "boxmaker.loopd",
                "turn",
                "--config",
                str(config),
                "--session",
                "held",
                "--say",
                "Hi",
            ),
            capture_output=True,
            text=True,
            timeout=RUN_BOUND_S,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        (line,) = lines(done.stdout)
        assert line["type"] == "error"
        assert line["code"] == "session_busy"
        assert log.log_path.read_bytes() == data
    assert env.fake.requests() == []
