"""bxctl chat against a scripted fake loopd on a real Unix socket, in-process through
main(argv, env); one run as a real `python -m boxmaker.bxctl` subprocess."""

import io
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker._cli import Environment, ExitStatus
from boxmaker.bxctl.cli import main
from boxmaker.bxctl.render import DIM
from boxmaker.proto import (
    ContentEvent,
    ReasoningEvent,
    ResultClass,
    ToolCallStartedEvent,
    ToolResultEvent,
    WaitingEvent,
)
from boxmaker.proto.frame import encode_frame
from boxmaker.proto.ids import SESSION_ID_RE
from boxmaker.proto.wire import ErrorCode
from tests.support.bxctl.fakeloopd import FakeLoopd, done, error, event
from tests.support.cli import Result, run_cli

HELLO = [event(ContentEvent("Hel")), event(ContentEvent("lo.")), done("Hello.")]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOXMAKER_SOCKET", raising=False)
    monkeypatch.delenv("BOXMAKER_OWNER_SOCKET", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("BOXMAKER_RUN", "/nonexistent/run")  # never the checkout's make run


def chat(sock: Path, *args: str, stdin: str = "", tty: bool = False) -> Result:
    return run_cli(main, ["chat", "--socket", str(sock), *args], stdin, tty=tty)


def test_json_prints_the_session_then_every_frame_body(tmp_path: Path) -> None:
    reply = [
        event(WaitingEvent(True)),
        event(ReasoningEvent("hmm")),
        event(ContentEvent("Hi.")),
        done("Hi."),
    ]
    with FakeLoopd(tmp_path / "loop.sock", [reply]) as fake:
        r = chat(fake.path, "--json", stdin="hello\n")
    assert r.status == ExitStatus.OK, r.stderr
    assert r.stderr == ""
    lines = [orjson.loads(line) for line in r.stdout.splitlines()]
    sid = lines[0]["session"]
    assert lines[0] == {"session": sid}
    assert SESSION_ID_RE.fullmatch(sid)
    assert lines[1:] == [
        {"event": {"type": "waiting", "slot_busy": True}},
        {"event": {"type": "reasoning", "text": "hmm"}},
        {"event": {"type": "content", "text": "Hi."}},
        {
            "content": "Hi.",
            "usage": {
                "cache_n": 10,
                "prompt_n": 20,
                "predicted_n": 5,
                "reasoning_tokens": 0,
                "thinking_capped": False,
            },
        },
    ]
    assert fake.turns == [{"session": sid, "content": "hello", "resume": False}]


def test_a_chat_runs_a_turn_per_line_and_later_turns_resume(tmp_path: Path) -> None:
    second = [
        event(ToolCallStartedEvent("clock")),
        event(ToolResultEvent("clock", ResultClass.PUBLIC, False)),
        event(ContentEvent("Noon.")),
        done("Noon."),
    ]
    with FakeLoopd(tmp_path / "loop.sock", [HELLO, second]) as fake:
        r = chat(fake.path, stdin="hi\n\n   \nwhat time is it?\n")
    assert r.status == ExitStatus.OK, r.stderr
    sid = r.stdout.splitlines()[0].removeprefix("session ")
    assert SESSION_ID_RE.fullmatch(sid)
    assert r.stdout == (
        f"session {sid}\nHello.\n[tool clock: done, public]\nNoon.\n"  # one line: not a tty
    )
    assert [(t["content"], t["resume"], t["session"]) for t in fake.turns] == [
        ("hi", False, sid),
        ("what time is it?", True, sid),
    ]


def test_quit_ends_the_chat_and_eof_does_too(tmp_path: Path) -> None:
    with FakeLoopd(tmp_path / "loop.sock", [HELLO, HELLO]) as fake:
        r = chat(fake.path, "--session", "s1", stdin="one\n/quit\ntwo\n")
        assert r.status == ExitStatus.OK
        assert [t["content"] for t in fake.turns] == ["one"]
        r = chat(fake.path, "--session", "s1", stdin="three")  # EOF with no newline
        assert r.status == ExitStatus.OK
        assert [t["content"] for t in fake.turns] == ["one", "three"]
    assert r.stdout == "session s1\nHello.\n"


def test_say_puts_only_the_answer_on_stdout(tmp_path: Path) -> None:
    reply = [
        event(ReasoningEvent("Let me think.")),
        event(ToolCallStartedEvent("clock")),
        event(ToolResultEvent("clock", ResultClass.PUBLIC, True)),
        event(WaitingEvent(False)),
        event(ContentEvent("It is noon.")),
        done("It is noon."),
    ]
    with FakeLoopd(tmp_path / "loop.sock", [reply]) as fake:
        r = chat(fake.path, "--session", "s1", "--say", "time?")
    assert r.status == ExitStatus.OK
    assert r.stdout == "It is noon.\n"
    assert r.stderr == (
        "session s1\n[reasoning] Let me think.\n[tool clock: done, public, truncated]\n"
        "[waiting for the inference server]\n"
    )
    assert fake.turns[0]["content"] == "time?"


def test_say_with_an_error_frame_exits_1_with_the_error_on_stderr(tmp_path: Path) -> None:
    reply = [error(ErrorCode.SESSION_BUSY, "session s1 has a turn running")]
    with FakeLoopd(tmp_path / "loop.sock", [reply, reply]) as fake:
        r = chat(fake.path, "--session", "s1", "--say", "hi")
        assert r.status == ExitStatus.ERROR
        assert r.stdout == ""
        assert r.stderr == "session s1\nerror session_busy: session s1 has a turn running\n"
        j = chat(fake.path, "--session", "s1", "--say", "hi", "--json")
    assert j.status == ExitStatus.ERROR
    assert [orjson.loads(line) for line in j.stdout.splitlines()] == [
        {"session": "s1"},
        {"code": "session_busy", "message": "session s1 has a turn running"},
    ]


def test_an_unknown_session_is_created_by_a_retry_with_resume_false(tmp_path: Path) -> None:
    refused = [error(ErrorCode.NO_SUCH_SESSION, "no session mine")]
    with FakeLoopd(tmp_path / "loop.sock", [refused, HELLO, HELLO]) as fake:
        r = chat(fake.path, "--session", "mine", "--json", stdin="a\nb\n")
    assert r.status == ExitStatus.OK, r.stderr
    assert [(t["session"], t["content"], t["resume"]) for t in fake.turns] == [
        ("mine", "a", True),
        ("mine", "a", False),
        ("mine", "b", True),
    ]
    # The refusal that was answered by the retry is not printed.
    assert "no_such_session" not in r.stdout
    assert len(r.stdout.splitlines()) == 1 + 2 * len(HELLO)


def test_the_retry_is_once_and_a_created_session_is_resumed_after_a_failed_turn(
    tmp_path: Path,
) -> None:
    replies = [
        [error(ErrorCode.NO_SUCH_SESSION, "no session x")],
        [error(ErrorCode.INFERENCE, "llama-server is down")],  # the session was created
        [error(ErrorCode.SESSION_EXISTS, "session x exists")],
        HELLO,
        [error(ErrorCode.NO_SUCH_SESSION, "gone")],
        [error(ErrorCode.SESSION_EXISTS, "exists after all")],  # not retried again
        HELLO,
    ]
    with FakeLoopd(tmp_path / "loop.sock", replies) as fake:
        r = chat(fake.path, "--session", "x", stdin="1\n2\n3\n")
    assert r.status == ExitStatus.OK
    assert [(t["content"], t["resume"]) for t in fake.turns] == [
        ("1", True),
        ("1", False),
        ("2", False),
        ("2", True),
        ("3", True),
        ("3", False),
    ]
    assert r.stderr == (
        "error inference: llama-server is down\nerror session_exists: exists after all\n"
    )


def test_thinking_is_on_the_wire_only_when_asked(tmp_path: Path) -> None:
    with FakeLoopd(tmp_path / "loop.sock", [HELLO, HELLO, HELLO]) as fake:
        assert chat(fake.path, "--say", "x", "--no-thinking").status == ExitStatus.OK
        assert chat(fake.path, "--say", "x", "--thinking").status == ExitStatus.OK
        assert chat(fake.path, "--say", "x").status == ExitStatus.OK  # loopd's [loop] thinking
        turns = fake.wait_turns(3)
    assert [t.get("thinking", "absent") for t in turns] == [False, True, "absent"]


def test_thinking_and_no_thinking_exclude_each_other(tmp_path: Path) -> None:
    r = chat(tmp_path / "loop.sock", "--say", "x", "--thinking", "--no-thinking")
    assert r.status == ExitStatus.USAGE
    assert "not allowed with argument" in r.stderr


def test_not_running_without_a_socket_file(tmp_path: Path) -> None:
    r = chat(tmp_path / "loop.sock", "--say", "hi")
    assert r.status == ExitStatus.ERROR
    assert r.stdout == ""
    [session, line] = r.stderr_lines
    assert session.startswith("session ")
    assert line == (
        f"bxctl chat: loopd is not running (no socket file at {tmp_path / 'loop.sock'}); "
        "start it with `supervisorctl -c <your supervisord.conf> start loopd`, "
        "or `loopd serve --config <path>`"
    )


def test_a_chat_without_a_socket_file_says_so_before_reading_a_line(tmp_path: Path) -> None:
    class Unread(io.StringIO):
        def readline(self, size: int | None = -1, /) -> str:  # type: ignore[override]
            raise AssertionError("stdin was read")

    env = Environment(stdin=Unread(), stdout=io.StringIO(), stderr=io.StringIO())
    status = main(["chat", "--socket", str(tmp_path / "loop.sock")], env)
    assert status == ExitStatus.ERROR
    assert "loopd is not running (no socket file at" in env.stderr.getvalue()  # type: ignore[attr-defined]


def test_not_running_with_a_socket_file_nobody_listens_on(tmp_path: Path) -> None:
    path = tmp_path / "loop.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))  # bound and closed: the file stays, connect is refused
    r = chat(path, stdin="hi\n")
    assert r.status == ExitStatus.ERROR
    assert len(r.stderr_lines) == 1
    assert "loopd is not running (nothing is listening at" in r.stderr
    assert "supervisorctl -c <your supervisord.conf> start loopd" in r.stderr


def test_the_socket_comes_from_the_environment_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeLoopd(tmp_path / "loop.sock", [HELLO]) as fake:
        monkeypatch.setenv("BOXMAKER_SOCKET", str(fake.path))
        r = run_cli(main, ["chat", "--say", "hi"])
        assert r.status == ExitStatus.OK
        assert r.stdout == "Hello.\n"
        # --socket wins over the environment.
        r = run_cli(main, ["chat", "--say", "hi", "--socket", str(tmp_path / "other.sock")])
        assert f"no socket file at {tmp_path / 'other.sock'}" in r.stderr
    monkeypatch.delenv("BOXMAKER_SOCKET")
    r = run_cli(main, ["chat", "--say", "hi"])
    assert "no socket file at /run/loop/loop.sock" in r.stderr


def test_a_connection_closed_before_the_final_frame_is_one_line(tmp_path: Path) -> None:
    with FakeLoopd(tmp_path / "loop.sock", [[event(ContentEvent("Half an ans"))]]) as fake:
        r = chat(fake.path, "--session", "s1", stdin="hi\nnever sent\n")
        assert len(fake.turns) == 1
    assert r.status == ExitStatus.ERROR
    assert r.stdout == "session s1\nHalf an ans\n"  # the open line is closed first
    assert r.stderr == (
        "bxctl chat: loopd closed the connection before the turn ended (1 frames received); "
        "the turn may or may not be in the session's log (`bxctl verify`)\n"
    )


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ([b"\x00\x00\x00\x05hello"], "frame is not JSON"),
        ([b"\x00\x00\x00\x00"], "frame length is 0"),
        (
            [encode_frame("turn_event", {"event": {"type": "x"}}, False)],
            "turn_event.event.type: expected an event type",
        ),
        ([done("x")[:-3]], "connection closed in the middle of a frame"),
        ([encode_frame("turn_done", {"content": "x"}, True)], "turn_done"),
        (
            [encode_frame("turn", {"session": "s", "content": "c", "resume": True}, True)],
            "a `turn` frame (only bxctl sends one)",
        ),
    ],
    ids=["not-json", "zero-length", "unknown-event", "cut-frame", "bad-done", "turn"],
)
def test_a_malformed_frame_from_loopd_is_one_line(
    tmp_path: Path, reply: list[bytes], why: str
) -> None:
    with FakeLoopd(tmp_path / "loop.sock", [reply]) as fake:
        r = chat(fake.path, "--say", "hi")
    assert r.status == ExitStatus.ERROR
    [_, line] = r.stderr_lines
    assert line.startswith("bxctl chat: malformed frame from loopd: "), line
    assert why in line


@pytest.mark.parametrize("sid", ["../x", "-rm", "a b", "x" * 129, ""])
def test_a_bad_session_id_is_a_usage_error_naming_the_pattern(tmp_path: Path, sid: str) -> None:
    with FakeLoopd(tmp_path / "loop.sock", [HELLO]) as fake:
        r = chat(fake.path, f"--session={sid}", stdin="hi\n")
        assert fake.turns == []
    assert r.status == ExitStatus.USAGE
    assert r.stdout == ""
    assert r.stderr.startswith("bxctl chat: session id ")
    assert SESSION_ID_RE.pattern in r.stderr


def test_an_empty_say_is_a_usage_error(tmp_path: Path) -> None:
    r = chat(tmp_path / "loop.sock", "--say", "  ")
    assert r.status == ExitStatus.USAGE
    assert r.stderr == "bxctl chat: --say needs some text to say\n"


@pytest.mark.parametrize(("tty", "no_color", "dimmed"), [(True, None, True), (True, "1", False)])
def test_reasoning_is_dimmed_on_a_terminal_unless_no_color(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tty: bool, no_color: str | None, dimmed: bool
) -> None:
    if no_color is not None:
        monkeypatch.setenv("NO_COLOR", no_color)
    reply = [event(ReasoningEvent("hmm")), event(ContentEvent("Hi.")), done("Hi.")]
    with FakeLoopd(tmp_path / "loop.sock", [reply]) as fake:
        r = chat(fake.path, "--session", "s1", stdin="hi\n", tty=tty)
    assert r.status == ExitStatus.OK
    assert (DIM in r.stdout) is dimmed
    # A terminal gets a prompt before each line read.
    assert r.stdout.startswith("session s1\n> ")
    assert "hmm" in r.stdout


def test_not_dimmed_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    reply = [event(ReasoningEvent("hmm")), event(ContentEvent("Hi.")), done("Hi.")]
    with FakeLoopd(tmp_path / "loop.sock", [reply]) as fake:
        r = chat(fake.path, "--session", "s1", stdin="hi\n")
    assert r.stdout == "session s1\n[reasoning] hmm\nHi.\n"  # marked: not dimmed


def test_python_dash_m_chat_say_as_a_subprocess(tmp_path: Path) -> None:
    with FakeLoopd(tmp_path / "loop.sock", [HELLO]) as fake:
        argv = [sys.executable, "-m", "boxmaker.bxctl", "chat", "--socket", str(fake.path)]
        p = subprocess.run(
            [*argv, "--say", "hello", "--session", "sub"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        turns = fake.wait_turns(1)
    assert (p.returncode, p.stdout, p.stderr) == (0, "Hello.\n", "session sub\n")
    assert turns == [{"session": "sub", "content": "hello", "resume": True}]


def test_a_reader_that_goes_away_ends_the_chat_without_a_traceback(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout now fails with EPIPE
    try:
        with FakeLoopd(tmp_path / "loop.sock", [HELLO]) as fake:
            argv = [sys.executable, "-m", "boxmaker.bxctl", "chat", "--socket", str(fake.path)]
            p = subprocess.run(
                [*argv, "--json", "--say", "hello", "--session", "gone"],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
    finally:
        os.close(write_end)
    assert (p.returncode, p.stderr) == (ExitStatus.ERROR, "")


def test_new_session_ids_carry_the_time_and_sort_by_age() -> None:
    from boxmaker._client.channel import new_session_id

    older, newer = new_session_id(1_796_000_000.0), new_session_id(1_796_000_001.0)
    assert re.fullmatch(r"20261130T\d{6}Z-[0-9a-f]{8}", older), older
    assert SESSION_ID_RE.fullmatch(older)
    assert sorted([newer, older]) == [older, newer]
    # The same second twice: the random suffix keeps them apart.
    assert len({new_session_id(1_796_000_000.0) for _ in range(50)}) == 50


def test_an_approval_this_chat_cannot_answer_says_so_at_once(tmp_path: Path) -> None:
    from boxmaker.proto import ApprovalNeededEvent

    reply = [event(ApprovalNeededEvent("c1", "shell", "ls")), done("Denied.")]
    with FakeLoopd(tmp_path / "loop.sock", [reply]) as fake:
        r = chat(fake.path, stdin="run ls\n")
    assert r.status == ExitStatus.OK, r.stderr
    [line] = [x for x in r.stderr_lines if x.startswith("[approval: this chat cannot answer it")]
    assert "--owner-socket" in line
    assert "denies it when its approval wait ends" in line


def test_a_closed_stdin_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    from boxmaker._cli import Environment

    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdin=None, stdout=out, stderr=err, environ={})  # type: ignore[arg-type]
    status = main(["chat", "--socket", str(tmp_path / "loop.sock")], env)
    assert status == ExitStatus.USAGE
    assert err.getvalue().startswith("bxctl chat: standard input is closed")
    assert "Traceback" not in err.getvalue()


def _chat_process(path: Path, **environ: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BOXMAKER_RUN": "/nonexistent/run", **environ}
    return subprocess.Popen(
        [sys.executable, "-m", "boxmaker.bxctl", "chat", "--socket", str(path), "--session", "s1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _read_until(stream: Any, text: bytes, bound_s: float = 30.0) -> bytes:
    """What `stream` gave up to and including `text` (bounded; the reads block on a pipe)."""
    got = b""
    deadline = time.monotonic() + bound_s
    while text not in got:
        assert time.monotonic() < deadline, f"no {text!r} in {got!r}"
        chunk = stream.read1(4096)
        assert chunk, f"the stream ended before {text!r}: {got!r}"
        got += chunk
    return got


@pytest.mark.parametrize("gone", ["stopped", "unlinked"])
def test_a_message_during_a_loopd_restart_waits_and_is_sent(tmp_path: Path, gone: str) -> None:
    """Issue 39 item 5: the first message after `restart loopd` ended the chat. Now the chat
    says it waits, and sends the message when loopd is back."""
    path = tmp_path / "loop.sock"
    first = FakeLoopd(path, [HELLO])
    proc = _chat_process(path)
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdin.write(b"one\n")
        proc.stdin.flush()
        _read_until(proc.stdout, b"Hello.\n")
        first.stop()  # loopd goes away: its socket file left behind (refused), or removed
        if gone == "unlinked":
            path.unlink()
        proc.stdin.write(b"two\n")
        proc.stdin.flush()
        _read_until(proc.stderr, b"waiting up to 60 s for loopd to come back")
        if gone == "stopped":
            path.unlink()
        with FakeLoopd(path, [HELLO]) as second:
            assert second.wait_turns(1)[0]["content"] == "two"
            _read_until(proc.stderr, b"[loopd is back: the message was sent]")
            proc.stdin.close()
            assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
        if first._thread.is_alive():
            first.stop()


def test_the_wait_for_loopd_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "loop.sock"
    first = FakeLoopd(path, [HELLO])
    proc = _chat_process(path, BOXMAKER_CHAT_WAIT_LOOPD_MS="1500")
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdin.write(b"one\n")
        proc.stdin.flush()
        _read_until(proc.stdout, b"Hello.\n")
        first.stop()
        proc.stdin.write(b"two\n")
        proc.stdin.close()
        assert proc.wait(30) == 1
        err = proc.stderr.read().decode()
        assert "waiting up to 1.5 s for loopd" in err
        assert "waited 1.5 s for it (--wait-loopd-ms or $BOXMAKER_CHAT_WAIT_LOOPD_MS" in err
        assert "the message was not sent" in err
    finally:
        proc.kill()
        proc.wait()
