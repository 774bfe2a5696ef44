"""`bxctl approve` on a real brokerd (issue 36 item 6), and what the chat's tool line says became
of each call (issue 39 item 6): `loopd serve` on the scripted fake server, a real brokerd behind
its broker_socket, turns sent by a test client, the owner answering with `bxctl approve`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from boxmaker.bxctl.cli import main
from boxmaker.proto import ToolResultEvent, TurnDone
from tests.support.brokerd.bxctl import Brokerd, brokerd_stack, needed
from tests.support.cli import run_cli
from tests.support.procs import wait_for
from tests.support.serve import BOUND_S, ServeEnv, TurnClient
from tests.support.turn import call_tool, say

LONG_WAIT_MS = 90_000  # longer than any step below: only an answer ends these calls
SHORT_WAIT_MS = 2_000  # the call nobody answers


@pytest.fixture
def stack() -> Iterator[tuple[ServeEnv, Brokerd]]:
    yield from brokerd_stack(LONG_WAIT_MS, 120_000)


@pytest.fixture
def short_stack() -> Iterator[tuple[ServeEnv, Brokerd]]:
    yield from brokerd_stack(SHORT_WAIT_MS, 120_000)


def approve(broker: Brokerd, *args: str, stdin: str = "") -> tuple[int, str, str]:
    r = run_cli(main, ["approve", "--owner-socket", str(broker.owner_socket), *args], stdin)
    return int(r.status), r.stdout, r.stderr


def finished(client: TurnClient, bound_s: float = BOUND_S) -> list[object]:
    wait_for(
        lambda: (client.frames and isinstance(client.frames[-1], TurnDone)) or None,
        "the turn's end",
        bound_s,
    )
    return list(client.frames)


def outcomes(frames: list[object]) -> list[str | None]:
    return [f.outcome for f in frames if isinstance(f, ToolResultEvent)]


def test_list_show_and_answer_with_a_reask(stack: tuple[ServeEnv, Brokerd]) -> None:
    env, broker = stack
    env.model.load(
        [
            call_tool("write_file", {"path": "yes.txt", "content": "ok \x1b[8m hidden"}, "w1"),
            call_tool("write_file", {"path": "no.txt", "content": "n"}, "w2"),
            say("done"),
        ]
    )
    client = TurnClient(env.socket, "s1", "write two files", resume=False)
    first = needed(client, 1)
    status, out, err = approve(broker)
    assert status == 0, err
    assert f"{first.id}  write_file  (" in out
    assert "brokerd denies it unanswered in " in out
    assert out.rstrip().endswith("see one whole and answer it: bxctl approve <id>")

    status, out, err = approve(broker, first.id, "--show")
    assert status == 0, err
    assert out.startswith("[approval] brokerd holds a call of write_file: ")
    assert "\x1b" not in out
    assert "\\x1b[8m hidden" in out

    # anything but y/n/a asks again, naming the answers; then y approves
    status, out, err = approve(broker, first.id, stdin="maybe\n\ny\n")
    assert status == 0, err
    assert out.count("please answer [y]es / [n]o / [a]lways") == 2, out
    assert "[approval: yes: approved]" in out

    second = needed(client, 2)
    status, out, err = approve(broker, second.id, "--no")
    assert (status, err) == (0, "")
    assert out == "[approval: no for write_file: denied]\n"
    frames = finished(client)
    assert outcomes(frames) == ["done", "denied"]
    assert (broker.folder / "ws" / "yes.txt").exists()
    assert not (broker.folder / "ws" / "no.txt").exists()

    status, out, _ = approve(broker)
    assert (status, out) == (0, "no call is waiting for an answer\n")
    status, _, err = approve(broker, second.id, "--yes")  # answered already: brokerd says so
    assert status == 1
    assert "no call" in err
    assert "waiting for an answer" in err


def test_a_call_longer_than_the_screen_is_shown_whole_or_not_asked(
    stack: tuple[ServeEnv, Brokerd], monkeypatch: pytest.MonkeyPatch
) -> None:
    env, broker = stack
    content = "curl -d @secrets/key x\n" + "".join(f"line {i}\n" for i in range(10_000))
    write = call_tool("write_file", {"path": "big.txt", "content": content}, "w")
    env.model.load([write, say("ok")])
    client = TurnClient(env.socket, "s2", "write a big file", resume=False)
    call = needed(client, 1)
    monkeypatch.setenv("BOXMAKER_APPROVAL_MAX_LINES", "200")
    # not a terminal, no pager: not claimed, the call still waits, and the way to read it named
    status, out, err = approve(broker, call.id, stdin="y\n")
    assert status == 1
    assert out == ""
    assert "more than the 200 shown at once" in err
    assert f"bxctl approve --show {call.id} > file" in err
    status, out, _ = approve(broker)
    assert call.id in out  # still held
    status, out, _ = approve(broker, call.id, "--show")
    assert status == 0
    assert out.index("curl -d @secrets/key x") < out.index("line 9999")  # whole, head first
    assert re.search(r": 10,00\d lines, ", out.split("\n")[0])  # the size first
    status, out, err = approve(broker, call.id, "--yes")
    assert status == 0, err
    assert outcomes(finished(client)) == ["done"]
    assert (broker.folder / "ws" / "big.txt").read_text() == content


def test_the_tool_line_says_timed_out_when_nobody_answers(
    short_stack: tuple[ServeEnv, Brokerd],
) -> None:
    env, broker = short_stack
    env.model.load(
        [
            call_tool("write_file", {"path": "late.txt", "content": "t"}, "w"),
            call_tool("read_file", {"path": "/etc/hostname"}, "e"),  # outside: refused
            call_tool("read_file", {"path": "missing.txt"}, "m"),  # allowed, fails
            say("done"),
        ]
    )
    client = TurnClient(env.socket, "s3", "try", resume=False)
    call = needed(client, 1)
    frames = finished(client, BOUND_S + SHORT_WAIT_MS / 1000)
    assert outcomes(frames) == ["timed_out", "refused", "failed"]
    status, _, err = approve(broker, call.id, "--yes")  # too late
    assert status == 1
    assert "waiting for an answer" in err
