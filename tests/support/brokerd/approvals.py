"""loopd's and the owner's sides of an asked call on a real brokerd (the Rig's sockets)."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from boxmaker.proto.frame import Frame
from tests.support.brokerd.rig import BOUND_S, Rig

ASK_WRITES = """
[[grant]]
tool = "write_file"
mode = "ask"

[[grant]]
tool = "read_file"
mode = "allow"

[[grant]]
tool = "note"
mode = "allow"
"""


class Call(threading.Thread):
    """loopd's side of one call, in a thread: every frame brokerd sends back."""

    def __init__(self, rig: Rig, tool: str, args: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.rig, self.tool, self.args = rig, tool, args
        self.frames: list[Frame] = []
        self.needed = threading.Event()
        self.start()

    def run(self) -> None:
        conn = self.rig.loopd()
        with conn.sock:
            conn.send("call", {"tool": self.tool, "arguments": orjson.dumps(self.args).decode()},
                      True)  # fmt: skip
            for frame in self.rig.frames(conn):
                self.frames.append(frame)
                if frame.kind == "approval_needed":
                    self.needed.set()

    def wait_needed(self) -> dict[str, Any]:
        assert self.needed.wait(BOUND_S), f"no approval_needed; frames {self.frames}"
        return self.frames[0].body

    def result(self) -> str:
        self.join(BOUND_S)
        assert not self.is_alive()
        assert self.frames[-1].kind == "result", self.frames
        return str(self.frames[-1].body["content"])


def owner_says(rig: Rig, call_id: str, answer: str, call_hash: str | None = None) -> Frame:
    conn = rig.owner()
    with conn.sock:
        conn.send("claim", {"id": call_id}, True)
        claimed = conn.recv()
        assert claimed is not None
        assert claimed.kind == "call", claimed
        conn.send("answer", {"id": call_id, "hash": call_hash or claimed.body["hash"],
                             "answer": answer}, True)  # fmt: skip
        got = conn.recv()
        assert got is not None
        return got


def owner_sees(rig: Rig, call_id: str, answer: str) -> dict[str, Any]:
    """Claims the call, answers it on the same connection (a claim closed unanswered is a no);
    the claimed call's body, what the owner's prompt shows."""
    conn = rig.owner()
    with conn.sock:
        conn.send("claim", {"id": call_id}, True)
        got = conn.recv()
        assert got is not None
        assert got.kind == "call", got
        conn.send("answer", {"id": call_id, "hash": got.body["hash"], "answer": answer}, True)
        answered = conn.recv()
    assert answered is not None
    assert answered.kind == "answered", answered
    return got.body


def pending(rig: Rig) -> int:
    conn = rig.owner()
    with conn.sock:
        conn.send("pending", {}, True)
        got = conn.recv()
    assert got is not None
    return len(got.body["calls"])


def owner_peek(rig: Rig, call_id: str) -> str:
    """The held call's hash, from `pending` (which claims nothing)."""
    conn = rig.owner()
    with conn.sock:
        conn.send("pending", {}, True)
        got = conn.recv()
    assert got is not None
    (held,) = [c for c in got.body["calls"] if c["id"] == call_id]
    return str(held["hash"])


def owner_claim(rig: Rig, call_id: str) -> str:
    conn = rig.owner()
    with conn.sock:
        conn.send("claim", {"id": call_id}, True)
        got = conn.recv()
    assert got is not None
    return str(got.body["hash"])


def owner_answers(rig: Rig, call_id: str, answer: str, call_hash: str) -> Frame:
    """An answer sent without a claim: refused or not, it leaves no claim behind."""
    conn = rig.owner()
    with conn.sock:
        conn.send("answer", {"id": call_id, "hash": call_hash, "answer": answer}, True)
        got = conn.recv()
    assert got is not None
    return got
