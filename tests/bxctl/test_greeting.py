"""A terminal chat's first lines when it resumes (issue 30 items 3 and 4), from a real session
log on disk: the last exchange with long lines shortened, and a mistyped --session id (found in
the new-user trial: one character short started a new session without a word) named with the
closest id."""

from pathlib import Path

from boxmaker.bxctl.stack import Stack
from boxmaker.bxctl.terminal import RESUME_LINE_CHARS, greeting
from boxmaker.proto import Assistant, User
from tests.support.turn import new_session

SID = "20261202T005031Z-213b0f67"
TIME = "2026-12-02T00:57:47.556Z"


def stack(home: Path) -> Stack:
    return Stack(socket=home / "loop.sock", owner_socket=None, home=home, run=None)


def test_resume_shows_the_last_exchange_shortened(tmp_path: Path) -> None:
    log = new_session(tmp_path, SID)
    log.append(User(TIME, "And of Germany?"))
    log.append(Assistant(TIME, "He was born in Berlin. " * 100, None, ()))
    log.close()
    lines = greeting(SID, False, stack(tmp_path)).splitlines()
    assert lines[0] == f"resumed {SID}: 1 turn, last at {TIME}"
    assert lines[1] == "  you: And of Germany?"
    answer = lines[2]
    assert answer.startswith("  assistant: He was born in Berlin.")
    assert answer.endswith(f"more characters: bxctl history {SID})")
    assert len(answer) < RESUME_LINE_CHARS + 80


def test_a_mistyped_session_id_names_the_closest(tmp_path: Path) -> None:
    new_session(tmp_path, SID).close()
    first = greeting(SID[:-1], False, stack(tmp_path)).splitlines()[0]
    assert first == (
        f"new session {SID[:-1]} (no session of that id in {tmp_path}; did you mean {SID}?)"
    )
    assert greeting("notes", False, stack(tmp_path)).splitlines()[0] == "new session notes"


def test_at_40_columns_the_first_lines_wrap_between_words(tmp_path: Path) -> None:
    """Issue 39 item 7: at 40 columns every line broke mid-word."""
    log = new_session(tmp_path, SID)
    log.append(User(TIME, "tell me about the weather in Berlin and in Paris today please"))
    log.close()
    wide = greeting(SID, False, stack(tmp_path)).splitlines()
    for width in (20, 32, 40, 41, 60):
        lines = greeting(SID, False, stack(tmp_path), width).splitlines()
        words = [w for line in wide for w in line.split()]
        assert [w for line in lines for w in line.split()] == words  # no word cut
        assert all(len(line) <= width or " " not in line.strip() for line in lines), lines
