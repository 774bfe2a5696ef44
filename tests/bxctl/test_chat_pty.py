"""`bxctl chat` on a real pseudo-terminal against a real `loopd serve` on the scripted fake server
(issue 30): what the owner types reaches the session's log as typed.

The chat runs as its own process with the pty as its controlling terminal (pty.fork), so the
line editor, the terminal's Ctrl-C (the tty driver's SIGINT) and bracketed paste are the real
ones. The reader answers the editor's cursor-position queries as a terminal would.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.bxctl.cli import main
from tests.support.cli import run_cli
from tests.support.fakeserver import Outcome
from tests.support.procs import wait_for
from tests.support.pty import (
    PROMPT_READY,
    TURN_S,
    Pty,
    bxctl_environ,
    bxctl_path,
    chat_at_prompt,
    open_chat,
    session_of,
    users,
    wait_users,
)
from tests.support.recorded import Recorded
from tests.support.replies import Reply, json_reply
from tests.support.serve import BOUND_S, ServeEnv, serve_env
from tests.support.turn import slow_stream

PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
LONG = "tell me a long story"
STORY_CHUNKS = 400  # at STORY_DELAY_S each: far longer than any bound below, so only a stop ends it
STORY_DELAY_S = 0.1


def story(_request: Recorded) -> Reply:
    """A completion that streams one word every STORY_DELAY_S, for far longer than the test."""
    words = [f"word{i} " for i in range(STORY_CHUNKS)]
    return slow_stream(words, STORY_DELAY_S, "chatcmpl-story")


def sparse_tokens(request: Recorded) -> Reply:
    body = request.json
    assert isinstance(body, dict)
    return json_reply(200, {"tokens": [1] * (len(body["content"]) // 32 + 1)})


@pytest.fixture
def stack() -> Iterator[ServeEnv]:
    with serve_env() as env:
        env.answer_message(LONG, story)
        # A token per 32 bytes: a 20,000-character paste then fits the fake's 2,048-token slot,
        # so these tests see the terminal, not loopd's measure of a message (issue 29.3).
        env.fake.on("POST", "/tokenize", sparse_tokens)
        env.start()
        yield env


def test_arrow_keys_edit_and_history_recalls_across_runs(stack: ServeEnv) -> None:
    with chat_at_prompt(stack) as (term, sid):
        term.send("helo wrld")
        term.send(b"\x1b[D" * 3 + b"o")  # Left x3: between w and r
        term.send(b"\x1b[H" + b"\x1b[C" * 3 + b"l")  # Home, Right x3: helo -> hello
        mark = len(term.output)
        term.send(b"\r")
        assert wait_users(stack, sid, 1) == ["hello world"]
        done = term.wait_output(r"ok\r\n", since=mark, timeout=TURN_S)
        term.wait_output(PROMPT_READY, since=done.end())
        term.send(b"\x04")  # Ctrl-D at an empty prompt: the end
        assert term.wait_exit() == 0
    history = stack.folder / "history"
    assert history.stat().st_mode & 0o777 == 0o600
    with open_chat(stack, "--session", sid) as again:
        again.wait_output(rf"resumed {sid}: 1 turn, last at ")
        again.wait_output(r"you: hello world")  # the last exchange, shown on resume
        again.wait_output(PROMPT_READY)
        again.send(b"\x1b[A\r")  # Up: the message of the run before
        assert wait_users(stack, sid, 2) == ["hello world", "hello world"]


@pytest.mark.parametrize("size", [4_096, 20_000])
def test_a_bracketed_paste_reaches_the_log_whole(stack: ServeEnv, size: int) -> None:
    line = "0123456789abcdefghijklmnopqrstuvwxyz " * 3 + "\n"
    text = (line * (size // len(line) + 1))[:size].rstrip("\n") + "END"
    with chat_at_prompt(stack) as (term, sid):
        term.send(PASTE_START + text.encode() + PASTE_END)
        term.send(b"\r")
        [got] = wait_users(stack, sid, 1)
        assert len(got) == len(text)
        assert got == text


def test_triple_quotes_make_one_message_of_several_lines(stack: ServeEnv) -> None:
    with chat_at_prompt(stack) as (term, sid):
        term.send('"""\rfirst line\rsecond line\r"""\r')
        assert wait_users(stack, sid, 1) == ["first line\nsecond line"]


def test_ctrl_c_stops_the_answer_and_the_session_goes_on(stack: ServeEnv) -> None:
    """Each step waits for the condition the next needs (issue 30 item 4: it once failed under
    load): the answer streaming before the Ctrl-C, the editor's prompt before typing, and the
    turn's own bound (TURN_S) wherever loopd may wait that long."""
    with chat_at_prompt(stack) as (term, sid):
        term.send(LONG + "\r")
        mark = len(term.output)
        # the turn has started streaming (a worker started first: the turn's bound, not BOUND_S)
        term.wait_output(r"word3 ", since=mark, timeout=TURN_S)
        term.send(b"\x03")  # Ctrl-C: the tty driver's SIGINT, caught by the running turn
        try:
            stopped_at = term.wait_output(r"\[stopped: the answer was cancelled\]", since=mark)
        except AssertionError as e:  # say what loopd said, to tell where the cancel went
            daemon = stack.daemons[0]
            raise AssertionError(f"{e}\nloopd: {daemon.lines}\n{daemon.err_lines}") from None
        # loopd closed the server's connection: the generation was cancelled there
        wait_for(
            lambda: (
                any(c.outcome is Outcome.CLIENT_CLOSED for c in stack.fake.connections()) or None
            ),
            "the server's connection closed by loopd",
            BOUND_S,
        )
        types = stack.record_types(sid)  # `stopped` is appended before error{stopped} is sent
        assert types[-2:] == ["user", "stopped"]
        stopped = stack.log_lines(sid)[-1]
        assert stopped["shown"].startswith("word0 word1 word2 word3 ")
        assert len(stopped["shown"].split()) < STORY_CHUNKS
        term.wait_output(PROMPT_READY, since=stopped_at.end())  # the editor reads again
        mark = len(term.output)
        term.send("and now?\r")  # the session is consistent: the next turn runs on it
        assert wait_users(stack, sid, 2) == [LONG, "and now?"]
        done = term.wait_output(r"ok\r\n", since=mark, timeout=TURN_S)
        assert stack.record_types(sid)[-3:] == ["user", "assistant", "usage"]
        shown = run_cli(main, ["history", sid, "--home", str(stack.home)])
        assert shown.status == 0, shown.stderr
        assert "you: tell me a long story" in shown.stdout
        assert "[stopped by the owner after: word0 word1 word2 word3 " in shown.stdout
        assert "you: and now?" in shown.stdout
        assert "assistant: ok" in shown.stdout
        as_json = run_cli(main, ["history", sid, "--home", str(stack.home), "--json"])
        entries = [orjson.loads(x) for x in as_json.stdout.splitlines()]
        kinds = [e["type"] for e in entries]
        assert kinds.index("stopped") == kinds.index("user") + 1  # the log's own order
        assert {e["epoch"] for e in entries} == {0}
        term.wait_output(PROMPT_READY, since=done.end())  # at the prompt, not in the turn
        term.send(b"\x03")  # Ctrl-C at an empty prompt: quit, naming the session
        term.wait_output(rf"session {sid}: to go on with it, run `bxctl chat --session {sid}`")
        assert term.wait_exit() == 0


def test_ctrl_c_twice_during_an_answer_quits(stack: ServeEnv) -> None:
    with chat_at_prompt(stack) as (term, sid):
        term.send(LONG + "\r")
        term.wait_output(r"word2 ", timeout=TURN_S)
        term.send(b"\x03")
        term.wait_output(r"stopping the answer")
        term.send(b"\x03")
        term.wait_output(rf"session {sid}: to go on with it")
        assert term.wait_exit() == 0


def test_help_is_answered_here_and_never_sent(stack: ServeEnv) -> None:
    with chat_at_prompt(stack) as (term, sid):
        term.send("/help\r")
        term.wait_output(r"/compact +fold the conversation")
        term.send("real\r")
        assert wait_users(stack, sid, 1) == ["real"]


def test_json_lines_are_unchanged_on_a_pipe(stack: ServeEnv) -> None:
    """Not a terminal: one message per line, no editor, `session <id>` first (scripts)."""
    import subprocess

    bxctl = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "bxctl"
    environ = {**os.environ, "BOXMAKER_SOCKET": str(stack.socket), "BOXMAKER_RUN": "/nonexistent"}
    done = subprocess.run(
        [str(bxctl), "chat", "--json"],
        input=b"hi\n",
        capture_output=True,
        env=environ,
        timeout=BOUND_S,
        check=True,
    )
    lines = [orjson.loads(x) for x in done.stdout.splitlines()]
    assert list(lines[0]) == ["session"]
    assert lines[-1]["content"] == "ok"


def test_ctrl_c_with_text_typed_clears_it_and_a_second_quits(stack: ServeEnv) -> None:
    with chat_at_prompt(stack) as (term, sid):
        term.send("never sent")
        term.wait_output(r"never sent")
        mark = len(term.output)
        term.send(b"\x03")  # clears the line: the chat goes on
        term.send("sent\r")
        assert wait_users(stack, sid, 1) == ["sent"]
        done = term.wait_output(r"ok\r\n", since=mark, timeout=TURN_S)
        term.wait_output(PROMPT_READY, since=done.end())  # typed into the editor, not the tty
        term.send("typed again")
        term.wait_output(r"typed again")
        term.send(b"\x03\x03")  # twice: quit
        term.wait_output(rf"session {sid}: to go on with it")
        assert term.wait_exit() == 0
        assert users(stack, sid) == ["sent"]


def test_a_chat_that_cannot_start_says_only_why(tmp_path: Path) -> None:
    """The new-user trial: with no loopd, the terminal chat printed `new session ...`, the
    approvals line and the typing help before the reason; now the reason alone, and exit 1."""
    bxctl = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "bxctl")
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "TERM": "xterm-256color",
        "BOXMAKER_SOCKET": str(tmp_path / "loop.sock"),
        "BOXMAKER_RUN": str(tmp_path / "no-run"),
    }
    with Pty([bxctl, "chat"], environ) as term:
        found = term.wait_output(r"bxctl chat: loopd is not running \(no socket file at ")
        assert term.wait_exit() == 1
        shown = term.output[: found.start()]
        assert "new session" not in shown
        assert "Enter sends" not in shown


def test_ctrl_r_then_enter_takes_the_match_and_enter_sends_it(stack: ServeEnv) -> None:
    """Issue 39 item 1: the chat's Enter took the search's, leaving an empty search prompt."""
    with chat_at_prompt(stack) as (term, sid):
        term.send("hello world\r")
        done = term.wait_output(r"ok\r\n", timeout=TURN_S)
        term.wait_output(PROMPT_READY, since=done.end())
        mark = len(term.output)
        term.send(b"\x12")  # Ctrl-R
        term.wait_output(r"reverse-i-search", since=mark)
        term.send("hel")
        term.wait_output(r"lo world", since=mark)  # the match, its "hel" highlighted
        term.send(b"\r")  # takes the match: it is at the prompt now
        term.send(b"\r")  # sends it
        assert wait_users(stack, sid, 2) == ["hello world", "hello world"]
        again = term.wait_output(r"ok\r\n", since=mark, timeout=TURN_S)
        term.wait_output(PROMPT_READY, since=again.end())
        mark = len(term.output)
        term.send(b"\x12")  # Ctrl-R, then Ctrl-C: the search ends, the chat goes on
        term.wait_output(r"reverse-i-search", since=mark)
        term.send("hel")
        term.wait_output(r"lo world", since=mark)
        term.send(b"\x03")
        term.send("third\r")
        assert wait_users(stack, sid, 3)[-1] == "third"


@pytest.mark.parametrize("between", ["def", "x", "new text", "d\x7fe", "\x1b[Dq"])
def test_a_second_ctrl_c_after_new_text_clears_it_and_never_quits(
    stack: ServeEnv, between: str
) -> None:
    """Issue 39 item 1: Ctrl-C cleared "abc", new text was typed, and a second Ctrl-C quit the
    chat with it; now it clears that text too: only an empty prompt's Ctrl-C quits."""
    with chat_at_prompt(stack) as (term, sid):
        term.send("abc")
        term.wait_output(r"abc")
        term.send(b"\x03")  # clears abc
        term.send(between)
        term.send(b"\x03")  # clears what was typed since: the chat goes on
        term.send("sent\r")
        assert wait_users(stack, sid, 1) == ["sent"]
        done = term.wait_output(r"ok\r\n", timeout=TURN_S)
        assert term.status is None
        term.wait_output(PROMPT_READY, since=done.end())
        term.send(b"\x03")  # at an empty prompt: quit
        term.wait_output(rf"session {sid}: to go on with it")
        assert term.wait_exit() == 0


def test_a_full_disk_under_the_history_is_one_line_and_the_chat_goes_on(stack: ServeEnv) -> None:
    """Issue 38 item 3: prompt_toolkit's FileHistory raised in the key handler: a traceback and
    "Press ENTER to continue..." at every line. The file is held over its size limit here
    (RLIMIT_FSIZE: EFBIG, as ENOSPC, from the write)."""
    history = stack.folder / "history"
    history.write_bytes(b"\n# old\n+earlier message\n" * 40)  # over the 512-byte limit below
    # no .pyc cut at the limit for later runs to load
    environ = bxctl_environ(stack, PYTHONDONTWRITEBYTECODE="1")
    argv = ["/bin/sh", "-c", 'ulimit -f 1 && exec "$0" chat', bxctl_path()]
    with Pty(argv, environ) as limited:
        sid = session_of(limited)
        limited.wait_output(PROMPT_READY)
        limited.send("first\r")
        limited.wait_output(
            rf"\[history: cannot write {re.escape(str(history))}: File too large; this chat's "
            r"messages are kept in memory only from now on\]"
        )
        limited.send("second\r")
        assert wait_users(stack, sid, 2) == ["first", "second"]
        limited.send(b"\x1b[A")  # Up: still recalled, from memory
        limited.wait_output(r"second")
        shown = limited.output
        assert "Press ENTER" not in shown
        assert "Traceback" not in shown
        assert shown.count("[history: cannot write") == 1


def test_a_fifo_as_the_history_file_never_hangs_the_chat(stack: ServeEnv) -> None:
    """Issue 38 item 2: a FIFO as the history hung every terminal chat before its prompt."""
    history = stack.folder / "history"
    os.mkfifo(history)
    with open_chat(stack) as term:
        sid = session_of(term)
        term.wait_output(r"bxctl chat: no history this time: .*history: is a FIFO")
        term.wait_output(PROMPT_READY)
        term.send("hi\r")
        assert wait_users(stack, sid, 1) == ["hi"]


def test_a_chat_into_a_file_greets_and_prompts_on_the_terminal(stack: ServeEnv) -> None:
    """Issue 39 item 7: `bxctl chat > file` on a terminal showed no greeting and no prompt:
    both went into the file."""
    bxctl = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "bxctl")
    into = stack.folder / "answers.txt"
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(stack.folder),
        "TERM": "xterm-256color",
        "BOXMAKER_SOCKET": str(stack.socket),
        "BOXMAKER_HOME": str(stack.home),
        "BOXMAKER_RUN": str(stack.folder / "no-run"),
    }
    with Pty(["/bin/sh", "-c", 'exec "$0" chat > "$1"', bxctl, str(into)], environ) as term:
        sid = session_of(term)  # the greeting, on the terminal
        term.wait_output(r"Enter sends")
        term.wait_output(r"> $")  # the prompt, on the terminal
        term.send("hi\r")
        assert wait_users(stack, sid, 1) == ["hi"]
        wait_for(lambda: "ok\n" in into.read_text() or None, "the answer in the file", TURN_S)
        term.send(b"\x04")  # Ctrl-D: the end of input
        assert term.wait_exit() == 0
        assert into.read_text() == f"session {sid}\nok\n"  # the file holds the chat's data only
        assert "ok" not in term.output.split("Enter sends", 1)[1]
