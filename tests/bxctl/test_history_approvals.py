"""`bxctl history` shows each call's approval (issue 30 item 4), from the logs a real stack run
writes: `loopd serve` against the scripted fake server, a real brokerd behind its broker_socket,
and the owner answering on brokerd's owner.sock. One turn makes four calls: one the owner
approves, one the owner denies, one nobody answers (brokerd's approval wait ends), one the grants
allow (no approval line), and one brokerd denies (a path outside the workspace).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import orjson
import pytest

from boxmaker.bxctl.cli import main
from boxmaker.proto import TurnDone
from tests.support.brokerd.bxctl import APPROVAL_MS, Brokerd, brokerd_stack, needed
from tests.support.cli import run_cli
from tests.support.procs import wait_for
from tests.support.serve import BOUND_S, ServeEnv, TurnClient
from tests.support.turn import call_tool, say


@pytest.fixture
def stack() -> Iterator[tuple[ServeEnv, Brokerd]]:
    yield from brokerd_stack(APPROVAL_MS, 30_000)


def test_history_shows_who_approved_or_denied_each_call(
    stack: tuple[ServeEnv, Brokerd],
) -> None:
    env, broker = stack
    env.model.load(
        [
            call_tool("write_file", {"path": "yes.txt", "content": "y"}, "w1"),
            call_tool("write_file", {"path": "no.txt", "content": "n"}, "w2"),
            call_tool("write_file", {"path": "late.txt", "content": "t"}, "w3"),
            call_tool("read_file", {"path": "a.txt"}, "r"),
            call_tool("read_file", {"path": "/etc/hostname"}, "e"),  # outside the workspace
            say("done"),
        ]
    )
    client = TurnClient(env.socket, "s1", "write three files", resume=False)
    broker.answer(needed(client, 1).id, "yes")
    broker.answer(needed(client, 2).id, "no")
    needed(client, 3)  # nobody answers: brokerd denies it after APPROVAL_MS
    wait_for(
        lambda: (client.frames and isinstance(client.frames[-1], TurnDone)) or None,
        "the turn's end",
        BOUND_S + APPROVAL_MS / 1000,
    )
    results = [r["content"] for r in env.log_lines("s1") if r["type"] == "tool_result"]
    assert (broker.folder / "ws" / "yes.txt").exists(), results
    assert (broker.folder / "ws" / "yes.txt").read_text() == "y"
    assert not (broker.folder / "ws" / "no.txt").exists()

    shown = run_cli(main, ["history", "s1", "--home", env.home, "--broker-log", broker.log])
    assert shown.status == 0, shown.stderr
    assert shown.stderr == ""
    lines = [line.split("  ", 2)[-1] for line in shown.stdout.splitlines()]
    approvals = [line for line in lines if line.startswith("approval of ")]
    asked = "approval of write_file: asked (grant: write_file ask on {})"
    assert approvals[0] == asked.format("yes.txt") + "; the owner answered yes: approved"
    assert approvals[1] == asked.format("no.txt") + "; the owner answered no: denied"
    assert approvals[2] == (
        asked.format("late.txt") + "; no answer before brokerd's approval wait ended: denied"
    )
    assert approvals[3].startswith("approval of read_file: denied by the grants: "), approvals
    assert len(approvals) == 4  # read_file, allowed by the grants, has no line
    # each follows its own call
    at = [i for i, line in enumerate(lines) if line.startswith("approval of ")]
    assert all(lines[i - 1].startswith("tool call call_tool ") for i in at), shown.stdout

    as_json = run_cli(main, ["history", "s1", "--home", env.home, "--broker-log", broker.log,
                             "--json"])  # fmt: skip
    entries = [orjson.loads(x) for x in as_json.stdout.splitlines()]
    got = [(e["tool"], e["decision"], e["answer"], e["by"], e["approved"])
           for e in entries if e["type"] == "approval"]  # fmt: skip
    assert got == [
        ("write_file", "ask", "yes", "owner", True),
        ("write_file", "ask", "no", "owner", False),
        ("write_file", "ask", "timeout", "timeout", False),
        ("read_file", "allow", None, "grants", True),
        ("read_file", "deny", None, "grants", False),
    ]
    kinds = [e["type"] for e in entries]
    first = kinds.index("approval")
    assert kinds[first - 1] == "assistant"  # after the record that made the call


def test_history_finds_make_runs_decision_log_and_says_when_it_cannot(
    stack: tuple[ServeEnv, Brokerd], monkeypatch: pytest.MonkeyPatch
) -> None:
    env, broker = stack
    env.model.load([call_tool("write_file", {"path": "x.txt", "content": "x"}, "w"), say("ok")])
    client = TurnClient(env.socket, "s2", "write", resume=False)
    broker.answer(needed(client, 1).id, "always")
    wait_for(
        lambda: (client.frames and isinstance(client.frames[-1], TurnDone)) or None,
        "the turn's end",
        BOUND_S,
    )
    run = env.folder / "mrun"
    run.mkdir()
    (run / "run.env").write_text(
        f"BOXMAKER_SOCKET={env.socket}\nBOXMAKER_HOME={env.home}\n"
        f"BOXMAKER_BROKERD_CONFIG={broker.config}\n"
    )
    monkeypatch.setenv("BOXMAKER_RUN", str(run))
    for name in ("BOXMAKER_HOME", "BOXMAKER_BROKER_LOG", "BOXMAKER_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    shown = run_cli(main, ["history", "s2"])  # the home and the log both from run.env
    assert shown.status == 0, shown.stderr
    assert "; the owner answered always: approved" in shown.stdout
    # another home: no log is known for it, and stderr says so (stdout is the history still)
    other = run_cli(main, ["history", "s2", "--home", env.home])
    assert other.status == 0
    assert "approvals are not shown: brokerd's decision log is not known here" in other.stderr
    assert "you: write" in other.stdout
    os.chmod(broker.log, 0o000)
    if os.access(broker.log, os.R_OK):  # root reads it anyway: a missing file instead
        missing = run_cli(main, ["history", "s2", "--broker-log", env.folder / "nope.jsonl"])
        assert "approvals are not shown: " in missing.stderr
        assert "nope.jsonl: No such file or directory" in missing.stderr
    else:
        denied = run_cli(main, ["history", "s2"])
        assert "Permission denied" in denied.stderr
