"""A cancel while a call is held for the owner's approval (issue 38.1): `loopd serve` on the
scripted fake server, a real brokerd behind its broker_socket. The owner's Ctrl-C (the turn's
`cancel`) withdraws the held call at once: brokerd denies it, the turn records the denial and ends
`stopped` long before brokerd's approval wait would have ended, and the owner's question, answered
after, says the call was withdrawn. Nothing ran."""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Iterator

import pytest

from boxmaker._cli import Environment
from boxmaker.bxctl.approve import ask_owner
from boxmaker.proto import ApprovalNeededEvent, ErrorCode, WireError
from boxmaker.proto.channel import cancel_frame
from tests.support.brokerd.rig import Rig, grant, loopd_and_brokerd, serve_loopd
from tests.support.procs import wait_for
from tests.support.serve import BOUND_S, ServeEnv, TurnClient
from tests.support.turn import calls, say

APPROVAL_MS = 300_000  # brokerd's own wait: the test passes only if the cancel cuts it short
TOOL_MS = 600_000  # loopd's tool timeout, over brokerd's wait (as a real config's is)
# Far under APPROVAL_MS, far over what a withdrawal takes on a busy machine (brokerd sees the
# closed call within its WATCH_S of 0.1 s).
STOPPED_WITHIN_S = 60.0


@pytest.fixture
def stack() -> Iterator[tuple[ServeEnv, Rig]]:
    with loopd_and_brokerd(grant("write_file", "ask")) as (env, rig):
        rig.broker = {"approval_timeout_ms": APPROVAL_MS}
        rig.start()
        serve_loopd(env, rig.socket, TOOL_MS)
        yield env, rig


def write_call() -> object:
    return calls(
        ("call_tool", {"name": "write_file", "arguments": {"path": "no.txt", "content": "n"}})
    )


def held(client: TurnClient) -> ApprovalNeededEvent:
    found = wait_for(
        lambda: next((f for f in client.frames if isinstance(f, ApprovalNeededEvent)), None),
        "the call to be held for the owner",
        BOUND_S,
    )
    assert isinstance(found, ApprovalNeededEvent)
    return found


def test_a_cancel_withdraws_the_held_call_and_the_owner_is_told(
    stack: tuple[ServeEnv, Rig],
) -> None:
    env, rig = stack
    env.model.load([write_call(), say("never asked")])  # type: ignore[list-item]
    client = TurnClient(env.socket, "s1", "write it", resume=False, bound_s=STOPPED_WITHIN_S)
    event = held(client)
    # The owner's question is open (claimed on owner.sock, reading a line that comes later).
    read_end, write_end = os.pipe()
    err = io.StringIO()
    owner_env = Environment(stdin=os.fdopen(read_end), stdout=io.StringIO(), stderr=err)
    asking = threading.Thread(target=ask_owner, args=(rig.owner_socket, event, owner_env))
    asking.start()
    try:
        wait_for(lambda: "approve write_file?" in err.getvalue() or None, "the question", BOUND_S)
        cancelled = time.monotonic()
        client.sock.sendall(cancel_frame())
        final = client.result()[-1]
        took = time.monotonic() - cancelled
    finally:
        with os.fdopen(write_end, "w") as owner_types:
            owner_types.write("y\n")  # the owner answers after all: too late
        asking.join(BOUND_S)
    assert isinstance(final, WireError), final
    assert final.code is ErrorCode.STOPPED
    assert took < STOPPED_WITHIN_S
    said = err.getvalue().splitlines()[-1]  # after the question (a pipe echoes no newline)
    assert "[approval: yes: not taken: no call " in said, said
    assert "loopd withdrew it" in said
    assert "did not run" in said
    assert not (rig.workspace / "no.txt").exists()
    results = [r for r in env.log_lines("s1") if r["type"] == "tool_result"]
    assert "denied" in results[-1]["content"]
    assert "cancelled" in results[-1]["content"]
    assert env.record_types("s1")[-1] == "stopped"
    assert b'"answer":"cancelled: loopd closed the call","mode":"deny"' in rig.log.read_bytes()
