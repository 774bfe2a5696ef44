"""`make verify-device`'s check runner (boxmaker/verify) against a real `loopd serve` that talks to
the scripted fake llama-server (tests/support/serve.py): the driver's turns through `bxctl
chat --say --json`, the session's log read from disk, and the rules of checks.py on what they
found. A model that makes no tool call gives SKIP, never PASS, and the exit status stays 0; a
call of the wrong tool, a request that does not extend the one before, or a cache lost after
the restart is FAIL, and the exit status is 1.

The whole-stack run against the real llama-server is `make verify-device` itself, not `make test`.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from boxmaker.proto import Usage
from boxmaker.verify import checks, device
from boxmaker.verify.checks import Check, Status
from boxmaker.verify.device import Run
from boxmaker.verify.stack import Stack
from tests.support.serve import ServeEnv, serve_env
from tests.support.turn import calls, chat_bodies, echo_via_call_tool, say


@pytest.fixture
def served() -> Iterator[tuple[ServeEnv, Run]]:
    with serve_env() as env:
        env.start()
        stack = Stack(None, None, None)  # never started: its paths point at the served loopd
        stack.home, stack.loop_sock = env.home, env.socket
        stack.config_path = env.folder / "loopd.toml"
        try:
            yield env, Run(stack, io.StringIO())
        finally:
            stack.stop()


def test_no_tool_call_is_skip_and_the_run_still_exits_0(served: tuple[ServeEnv, Run]) -> None:
    env, run = served
    env.model.load([say("Paris.")])
    run.add(checks.judge_plain_turn("plain", *run.say("What is the capital of France?")))
    run.add(run.budget())
    env.model.load([say("I cannot tell the time.")])  # the small model's way: no call at all
    run.add(run.clock())
    run.add(run.log())
    statuses = [(c.name, c.status) for c in run.results]
    assert statuses == [
        ("plain", Status.PASS),
        ("baseline", Status.PASS),
        ("clock", Status.SKIP),
        ("log", Status.PASS),
    ], run.out.getvalue()  # type: ignore[attr-defined]
    assert run.results[2].found == checks.NO_CALL
    assert checks.exit_status(run.results) == 0
    printed = run.out.getvalue().splitlines()  # type: ignore[attr-defined]
    assert printed[2].startswith("SKIP clock: the model made no tool call")
    assert checks.judge_requests(chat_bodies(env.fake)).status is Status.PASS


def times_now() -> str:
    """This minute and the next, as an answer quoting the time would (the call comes after)."""
    now = datetime.now(UTC)
    return f"{now:%H:%M} or {now + timedelta(minutes=1):%H:%M}"


def test_calls_made_are_checked_fully(served: tuple[ServeEnv, Run]) -> None:
    """Without brokerd loopd answers clock itself: its result is read, and the answer too."""
    env, run = served
    env.model.load([calls(("clock", {})), say(f"It is {times_now()} UTC.")])
    clock = run.clock()
    assert clock.status is Status.PASS, clock
    assert clock.found.startswith("calls clock; result '20"), clock
    # The call and its result, but an answer that does not use it: FAIL.
    env.model.load([calls(("clock", {}), prefix="c2"), say("It is noon.")])
    unused = run.clock()
    assert unused.status is Status.FAIL, unused
    assert "the answer does not quote the time" in unused.found
    # A call of another tool than the one asked for: FAIL, not SKIP, and the run exits 1.
    env.model.load([calls(("find_tool", {"query": "time"}), prefix="c3"), say("Noon.")])
    wrong = run.clock()
    assert wrong.status is Status.FAIL, wrong
    assert "no call of clock" in wrong.found
    # No other tool is reachable without brokerd: echo is not there (FakeTools is test code).
    env.model.load([calls(echo_via_call_tool("hi"), prefix="c4"), say("hi")])
    echo = run.tool_turn("clock", "echo", checks.contains_rule(["hi"], ["hi"]), "an echo")
    assert echo.status is Status.FAIL, echo
    assert "the result lacks" in echo.found, echo
    assert "no tool named" in echo.found, echo
    assert run.log().status is Status.PASS
    assert checks.exit_status([clock, unused, wrong, echo]) == 1


def test_a_request_that_does_not_extend_the_one_before_fails(served: tuple[ServeEnv, Run]) -> None:
    env, run = served
    for text in ("One.", "Two.", "Three."):
        env.model.load([say("ok")])
        assert run.say(text)[0] is not None
    bodies = chat_bodies(env.fake)
    assert checks.judge_requests(bodies).status is Status.PASS
    # The session is keyed by its first two messages: change the answer after them.
    first, user, _, *rest = bodies[-1]["messages"]
    changed = [first, user, {"role": "assistant", "content": "not what was said"}, *rest]
    edited = [*bodies[:-1], {**bodies[-1], "messages": changed}]
    failed = checks.judge_requests(edited)
    assert failed.status is Status.FAIL
    assert "does not extend the one before" in failed.found


def test_a_lost_cache_after_the_restart_fails(served: tuple[ServeEnv, Run]) -> None:
    env, run = served
    env.model.load([say("ok")])
    run.say("Hi.")
    before = run.records()
    env.model.load([say("bye")])
    done, error = run.say("Bye.")
    after = run.records()
    assert checks.judge_resume(before, after, done, error).status is Status.PASS
    # The same turn as if the server had dropped the slot: its first Usage has no cache.
    lost = [Usage(u.time, 0, u.prompt_n + u.cache_n, u.predicted_n, 0, False)
            if isinstance(u, Usage) and i >= len(before) else u
            for i, u in enumerate(after)]  # fmt: skip
    check = checks.judge_resume(before, lost, done, error)
    assert check.status is Status.FAIL, check
    assert check.found.startswith("cache_n 0 of "), check


def test_a_step_that_raises_is_one_fail_line() -> None:
    out = io.StringIO()
    run = Run(Stack(None, None, None), out)
    try:
        run.guarded("resume", "a resumed turn", lambda: (_ for _ in ()).throw(OSError("gone")))
        run.guarded("plain", "an answer", lambda: Check("plain", Status.SKIP, "n/a", "x"))
    finally:
        run.stack.stop()
    assert out.getvalue().splitlines() == [
        "FAIL resume: gone (expected: a resumed turn)",
        "SKIP plain: n/a (expected: x)",
    ]
    assert checks.exit_status(run.results) == 1
    assert checks.summary(run.results) == "0 PASS, 1 FAIL, 1 SKIP"


def test_config_needs_upstream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert device.main(["--config", str(tmp_path / "loopd.toml")]) == 2
    assert "CONFIG= and UPSTREAM= go together" in capsys.readouterr().err
