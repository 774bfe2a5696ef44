"""Class 5 of issue 27, brokerd's side: loopd cannot exhaust brokerd. Past `[broker] max_held`
calls waiting for the owner, one more is one clear denial (the held ones still wait, and a slot
freed is usable again); past `[broker] max_connections` open connections, one more gets an error
frame naming the key. Real brokerd, real sockets, several sizes."""

from __future__ import annotations

import contextlib

import pytest

from tests.support.brokerd.approvals import ASK_WRITES, Call, owner_says, pending
from tests.support.brokerd.rig import BOUND_S, Rig
from tests.support.procs import wait_for


@pytest.mark.parametrize("held", [1, 2, 3, 5, 8])
def test_one_call_past_max_held_is_denied_and_the_held_ones_still_wait(rig: Rig, held: int) -> None:
    rig.grants_text = ASK_WRITES
    rig.broker = {"max_held": held, "approval_timeout_ms": int(BOUND_S * 3000)}
    rig.start()
    calls = [Call(rig, "write_file", {"path": f"f{i}", "content": "x"}) for i in range(held)]
    for call in calls:
        call.wait_needed()
    extra = Call(rig, "write_file", {"path": "over", "content": "x"})
    text = extra.result()
    assert "max_held" in text, text
    assert text.startswith("error: denied"), text
    assert [f.kind for f in extra.frames] == ["result"]  # never shown to the owner
    assert pending(rig) == held
    # Answering one frees its place: the next call is held again, not refused.
    owner_says(rig, calls[0].wait_needed()["id"], "yes")
    assert calls[0].result().startswith("wrote")
    wait_for(lambda: pending(rig) == held - 1, "the answered call to leave the pending list")
    again = Call(rig, "write_file", {"path": "again", "content": "x"})
    again.wait_needed()
    assert not (rig.workspace / "over").exists()


@pytest.mark.parametrize("limit", [1, 2, 4, 7, 12])
def test_one_connection_past_max_connections_gets_an_error_naming_the_key(
    rig: Rig, limit: int
) -> None:
    rig.broker = {"max_connections": limit}
    rig.start()
    with contextlib.ExitStack() as stack:
        conns = [rig.loopd() for _ in range(limit)]
        for conn in conns:
            stack.enter_context(conn.sock)
        # Each is served (a list answers), so each holds its place.
        for conn in conns:
            conn.send("list", {}, True)
            got = conn.recv()
            assert got is not None
            assert got.kind == "tools"
        extra = rig.loopd()
        with extra.sock:
            got = extra.recv()
            assert got is not None
            assert got.kind == "error", got
            assert "max_connections" in got.body["message"]
        # The owner's socket has its own count: the owner still gets in.
        assert pending(rig) == 0

    # All closed: once brokerd saw them close, a new connection is served again.
    def served() -> str | None:
        try:
            return str(rig.call("read_file", {"path": "nothing"})["content"])
        except (OSError, AssertionError):  # refused: brokerd has not yet seen them close
            return None

    wait_for(served, "a connection served after the others closed")
