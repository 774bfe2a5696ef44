"""An approval asked in `bxctl chat` on a real pseudo-terminal (issue 30): `loopd serve` on the
scripted fake server, a real brokerd behind its broker_socket, the chat answering on brokerd's
owner.sock. `y` approves the call; Ctrl-C at the question denies it and stops the answer (the
new-user trial found the Ctrl-C said "stopping the answer" while the question went on waiting).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.bxctl.decisions import read_asks
from tests.bxctl.test_chat_pty import PROMPT_READY, TURN_S, Pty
from tests.bxctl.test_history_approvals import Brokerd, call_tool
from tests.support.procs import Daemon, python_module
from tests.support.serve import BOUND_S, START_LINE, ServeEnv, config_text, serve_env
from tests.support.turn import say

QUESTION = r"approve write_file\? \[y\]es / \[n\]o / \[a\]lways: "


@pytest.fixture
def stack() -> Iterator[tuple[ServeEnv, Brokerd]]:
    with serve_env() as env:
        broker = Brokerd(env.folder, approval_ms=60_000)  # longer than any wait below
        env.daemons.append(broker.daemon)
        path = env.folder / "loopd.toml"
        path.write_text(
            config_text(env.folder, loop={"tool_timeout_ms": 90_000})
            + f'[tools]\nbroker_socket = "{broker.socket}"\nbroker_timeout_ms = 90000\n'
        )
        daemon = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(path)))
        env.daemons.append(daemon)
        daemon.wait_for_line(START_LINE, BOUND_S)
        yield env, broker


def open_chat(env: ServeEnv, broker: Brokerd) -> Pty:
    bxctl = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "bxctl")
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(env.folder),
        "TERM": "xterm-256color",
        "BOXMAKER_SOCKET": str(env.socket),
        "BOXMAKER_OWNER_SOCKET": str(broker.owner_socket),
        "BOXMAKER_HOME": str(env.home),
        "BOXMAKER_RUN": str(env.folder / "no-run"),
        "BOXMAKER_CHAT_HISTORY": str(env.folder / "history"),
    }
    return Pty([bxctl, "chat", "--session", "s1"], environ)


def test_y_at_the_question_approves_the_call(stack: tuple[ServeEnv, Brokerd]) -> None:
    env, broker = stack
    env.model.load([call_tool("write_file", {"path": "yes.txt", "content": "y"}, "w"), say("ok")])
    term = open_chat(env, broker)
    try:
        term.wait_output(PROMPT_READY)
        term.send("write it\r")
        term.wait_output(QUESTION, timeout=TURN_S)
        term.send("y\r")
        term.wait_output(r"\[approval: yes: approved\]")
        term.wait_output(r"ok\r\n", timeout=TURN_S)
        assert (broker.folder / "ws" / "yes.txt").read_text() == "y"
    finally:
        term.close()


def test_ctrl_c_at_the_question_denies_the_call_and_stops(stack: tuple[ServeEnv, Brokerd]) -> None:
    env, broker = stack
    # the stopped turn asks for nothing after the denied call: the cancel came first
    env.model.load([call_tool("write_file", {"path": "no.txt", "content": "n"}, "w"), say("ok")])
    term = open_chat(env, broker)
    try:
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
    finally:
        term.close()
