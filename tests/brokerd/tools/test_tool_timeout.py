"""Issue 29 item 6: loopd's tool timeout and brokerd agree on a call's fate. loopd's real runner
(`run_tools`, `[loop] tool_timeout_ms`) over the real BrokerPort to a real brokerd: past the
timeout the call is cancelled in brokerd (a command killed with every process it started, a held
ask denied and gone from the owner's list, a tool not started), and the ToolResult loopd gives
the model says so. A call that finishes in time answers as it ran."""

from __future__ import annotations

import time
import uuid

import pytest

from boxmaker.loopd.tools.port import BrokerPort
from boxmaker.loopd.turn.runner import run_tools
from boxmaker.proto import ToolRequest, ToolResponse
from tests.support.brokerd.approvals import pending
from tests.support.brokerd.rig import Rig, grant, sandbox_workspace
from tests.support.brokerd.sandbox import PYTHON, processes_with
from tests.support.procs import wait_for

TIMEOUT_S = 3.0  # [loop] tool_timeout_ms in these tests
GRANTS = grant("shell") + grant("write_file", "ask")


def start(rig: Rig) -> None:
    rig.grants_text = GRANTS
    rig.broker = {"approval_timeout_ms": 60_000}
    sandbox_workspace(rig)
    rig.start()


def call(rig: Rig, tool: str, arguments: str) -> str:
    port = BrokerPort(rig.socket, 60.0, lambda *_: None, "s", call_timeout_s=TIMEOUT_S)
    started = time.monotonic()
    (outcome,) = run_tools(port, [ToolRequest(1, tool, arguments)], TIMEOUT_S, parallel=False)
    assert time.monotonic() - started < TIMEOUT_S + 1.0  # the runner's own bound held
    assert isinstance(outcome, ToolResponse), outcome  # brokerd's answer, not the runner's
    return outcome.content


def shell(command: str) -> str:
    import orjson

    return orjson.dumps({"command": command}).decode()


LONG_COMMANDS = {
    "sleep": "sleep 60; touch done",
    "a busy loop": f"{PYTHON} -c 'while True: pass'; touch done",
    "a heartbeat": "while :; do date +%s%N > beat; sleep 0.05; done",
    "a background child": "(sleep 60; touch done) & sleep 60",
    "a detached grandchild": "setsid sh -c 'sleep 60; touch done' & wait",
}


@pytest.mark.parametrize("name", LONG_COMMANDS)
def test_a_command_past_the_timeout_is_killed_and_the_result_says_so(rig: Rig, name: str) -> None:
    start(rig)
    token = uuid.uuid4().hex
    text = call(rig, "shell", shell(f"# {token}\n{LONG_COMMANDS[name]}"))
    assert "killed: loopd gave up on the call" in text, text
    wait_for(lambda: not processes_with(token), "the command's processes to be gone")
    beat = rig.workspace / "beat"
    last = beat.read_bytes() if beat.exists() else b""
    time.sleep(0.3)  # a heartbeat every 0.05 s would have moved by now
    assert (beat.read_bytes() if beat.exists() else b"") == last
    assert not (rig.workspace / "done").exists()


def test_a_held_ask_past_the_timeout_is_denied_and_leaves_the_owners_list(rig: Rig) -> None:
    start(rig)
    text = call(rig, "write_file", '{"path": "asked.txt", "content": "x"}')
    assert "cancelled: loopd closed the call" in text, text
    assert pending(rig) == 0
    assert not (rig.workspace / "asked.txt").exists()


def test_a_call_in_time_answers_as_it_ran(rig: Rig) -> None:
    start(rig)
    text = call(rig, "shell", shell("sleep 0.2; echo finished"))
    assert "finished" in text
    assert "[exit status 0]" in text


def test_a_brokerd_that_cannot_answer_the_cancel_is_named_before_the_timeout(rig: Rig) -> None:
    """brokerd stopped mid-call (SIGSTOP): loopd's result comes within the timeout, says the
    fate is in brokerd's log; once brokerd goes on, it finds loopd gone and kills the command."""
    import signal
    import threading

    start(rig)
    assert rig.daemon is not None
    token = uuid.uuid4().hex
    got: list[str] = []
    worker = threading.Thread(
        target=lambda: got.append(call(rig, "shell", shell(f"# {token}\nsleep 60"))), daemon=True
    )
    worker.start()
    wait_for(lambda: processes_with(token), "the command to run")
    rig.daemon.send_signal(signal.SIGSTOP)
    try:
        worker.join(TIMEOUT_S + 2.0)
        assert got, "loopd's side gave no result"
        assert "whether the call ran is in brokerd's log" in got[0], got[0]
    finally:
        rig.daemon.send_signal(signal.SIGCONT)
    wait_for(lambda: not processes_with(token), "the command to be killed once brokerd went on")
