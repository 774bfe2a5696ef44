"""A turn through the real stack: `loopd serve` (its workers) against the scripted fake
llama-server, with [tools] broker_socket set to a real brokerd. The model calls find_tool, then
call_tool(write_file) (an `ask`: the owner approves on owner.sock), then call_tool(read_file).
Then brokerd is stopped, and the next turn's tool call answers that the tools are unavailable,
and the turn still ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from boxmaker.bxctl.cli import main
from boxmaker.proto import ApprovalNeededEvent, TurnDone
from tests.brokerd.rig import Rig, remove, short_base
from tests.loopd.serve_support import (
    BOUND_S,
    START_LINE,
    ServeEnv,
    TurnClient,
    config_text,
    serve_env,
)
from tests.loopd.turn.support import calls, say
from tests.support.cli import run_cli
from tests.support.procs import Daemon, python_module, wait_for

GRANTS = """
[[grant]]
tool = "write_file"
mode = "ask"

[[grant]]
tool = "read_file"
mode = "allow"

[[grant]]
tool = "edit_file"
mode = "deny"
"""


@pytest.fixture
def stack() -> Iterator[tuple[ServeEnv, Rig]]:
    base = short_base()
    rig = Rig(base, grants_text=GRANTS)
    try:
        with serve_env() as env:
            yield env, rig
    finally:
        if rig.daemon is not None:
            rig.daemon.kill()
        remove(base)


def start_loopd(env: ServeEnv, rig: Rig) -> Daemon:
    path = env.folder / "loopd.toml"
    path.write_text(
        config_text(env.folder, loop={"tool_timeout_ms": 10_000})
        + f'[tools]\nbroker_socket = "{rig.socket}"\nbroker_timeout_ms = 10000\n'
    )
    daemon = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(path)))
    env.daemons.append(daemon)
    daemon.wait_for_line(START_LINE, BOUND_S)
    return daemon


def tool_results(env: ServeEnv, session: str) -> list[str]:
    return [str(r["content"]) for r in env.log_lines(session) if r["type"] == "tool_result"]


def approve(rig: Rig, call_id: str) -> None:
    conn = rig.owner()
    with conn.sock:
        conn.send("claim", {"id": call_id}, True)
        claimed = conn.recv()
        assert claimed is not None
        conn.send("answer", {"id": call_id, "hash": claimed.body["hash"], "answer": "yes"}, True)
        answered = conn.recv()
    assert answered is not None
    assert answered.kind == "answered"


def test_find_write_with_approval_read_then_brokerd_down(stack: tuple[ServeEnv, Rig]) -> None:
    env, rig = stack
    rig.start()
    start_loopd(env, rig)
    write: dict[str, Any] = {"name": "write_file",
                             "arguments": {"path": "a.txt", "content": "hello"}}  # fmt: skip
    env.model.load(
        [
            calls(("find_tool", {"query": "file"})),
            calls(("call_tool", write), prefix="w"),
            calls(("call_tool", {"name": "read_file", "arguments": {"path": "a.txt"}}), prefix="r"),
            say("done"),
        ]
    )
    turn = TurnClient(env.socket, "s1", "write a.txt", resume=False)
    needed = wait_for(
        lambda: next((f for f in turn.frames if isinstance(f, ApprovalNeededEvent)), None),
        "an approval_needed event on the channel",
        BOUND_S,
    )
    assert needed.tool == "write_file"
    assert needed.summary == "write a.txt: 5 bytes (a new file)"
    approve(rig, needed.id)
    wait_for(lambda: turn.frames and isinstance(turn.frames[-1], TurnDone), "the turn's end")
    found, wrote, read = tool_results(env, "s1")
    assert '"write_file"' in found
    assert '"read_file"' in found
    assert '"edit_file"' not in found  # denied everywhere: find_tool does not offer it
    assert wrote == "wrote a.txt: 5 bytes"
    assert read == "hello"
    assert (rig.workspace / "a.txt").read_text() == "hello"

    rig.stop()  # brokerd down: the tools are unavailable, the turn goes on
    env.model.load(
        [
            calls(("call_tool", {"name": "read_file", "arguments": {"path": "a.txt"}}), prefix="x"),
            say("no tools"),
        ]
    )
    turn = TurnClient(env.socket, "s1", "read it again")
    wait_for(lambda: turn.frames and isinstance(turn.frames[-1], TurnDone), "the second turn's end")
    last = tool_results(env, "s1")[-1]
    assert "tools are unavailable" in last


@pytest.mark.parametrize(
    ("typed", "written", "said"),
    [
        ("yes\n", True, "[approval: yes: approved]"),
        ("\n", False, "[approval: empty: denied]"),  # no default: an empty line says no
        ("", False, "no answer (end of input): denied"),  # EOF at the question
        ("sure\n", False, "[approval: no: denied]"),  # not a yes
    ],
    ids=["yes", "empty", "eof", "other"],
)
def test_bxctl_chat_asks_the_owner_and_answers_brokerd(
    stack: tuple[ServeEnv, Rig], typed: str, written: bool, said: str
) -> None:
    env, rig = stack
    rig.start()
    start_loopd(env, rig)
    write = {"name": "write_file", "arguments": {"path": "a.txt", "content": "hello"}}
    read = {"name": "read_file", "arguments": {"path": "a.txt"}}
    env.model.load(
        [
            calls(("find_tool", {"query": "file"})),
            calls(("call_tool", write), prefix="w"),
            calls(("call_tool", read), prefix="r"),
            say("done"),
        ]
    )
    out = run_cli(
        main,
        ["chat", "--socket", env.socket, "--owner-socket", rig.owner_socket, "--session", "s2"],
        stdin="write a.txt\n" + typed,
    )
    assert out.status == 0, out.stderr
    assert "write a.txt: 5 bytes (a new file)" in out.stderr
    assert 'paths = ["a.txt"]' in out.stderr  # what "always" would add, shown first
    assert said in out.stderr
    assert (rig.workspace / "a.txt").exists() is written
    found, wrote, got = tool_results(env, "s2")
    assert '"write_file"' in found
    if written:
        assert (wrote, got) == ("wrote a.txt: 5 bytes", "hello")
    else:
        assert wrote.startswith("error: denied: the owner did not approve")
        assert got == "error: a.txt: no such file or folder"
