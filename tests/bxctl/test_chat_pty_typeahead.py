"""What the owner types while an answer streams, on a real pty (the new-user trial: the tty
echoed it into the middle of the answer). The chat turns the terminal's echo off during a turn,
so the answer stays whole, and the next prompt has what was typed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.pty import PROMPT_READY, TURN_S, open_chat, session_of, wait_users
from tests.support.recorded import Recorded
from tests.support.replies import Reply
from tests.support.serve import ServeEnv, serve_env
from tests.support.turn import slow_stream

SLOW = "answer slowly"
WORDS = 30
DELAY_S = 0.1


def slow(_request: Recorded) -> Reply:
    timings = {"cache_n": 0, "prompt_n": 10, "predicted_n": WORDS}
    return slow_stream([f"slow{i} " for i in range(WORDS)], DELAY_S, "chatcmpl-slow", timings)


@pytest.fixture
def stack() -> Iterator[ServeEnv]:
    with serve_env() as env:
        env.answer_message(SLOW, slow)
        env.start()
        yield env


def test_typing_during_an_answer_is_not_echoed_into_it(stack: ServeEnv) -> None:
    with open_chat(stack) as term:
        sid = session_of(term)
        term.wait_output(PROMPT_READY)
        term.send(SLOW + "\r")
        started = term.wait_output(r"slow0 ", timeout=TURN_S)
        term.send("typed ahead")
        ended = term.wait_output(rf"slow{WORDS - 1} ", since=started.end())
        answer = term.output[started.start() : ended.end()]
        assert "typed ahead" not in answer
        assert " ".join(f"slow{i}" for i in range(WORDS)) in answer.replace("  ", " ")
        prompt = term.wait_output(PROMPT_READY, since=ended.end())
        term.wait_output(r"typed ahead", since=prompt.end())  # the next prompt has it
        term.send("\r")
        assert wait_users(stack, sid, 2) == [SLOW, "typed ahead"]
