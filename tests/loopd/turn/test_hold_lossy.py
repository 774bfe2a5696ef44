"""A write_file that would lose lines of a file the turn read, when the owner asked for a change
that removes nothing, is held (turn.hold.lossy_write, issue 40): the cases are the tool model's
own (asked to put 'buy stamps' at the end of todo.md it wrote the list back without its dashes)."""

from __future__ import annotations

import json

import pytest

from boxmaker.loopd.turn.hold import hold
from boxmaker.proto import Assistant, ResultClass, ToolCall, ToolResult, User
from boxmaker.proto.log import LogRecord
from tests.support.nudge_turn import START, T

TODO = "- mow lawn\n- fix tap\n"
STAMPS = "put 'buy stamps' at the end of todo.md"


def turn(message: str, *calls: tuple[str, dict[str, object], str, bool]) -> list[LogRecord]:
    """The owner's message, then each (tool, arguments, result, truncated) answered."""
    out: list[LogRecord] = [START, User(T, message)]
    for i, (tool, args, result, cut) in enumerate(calls):
        call = ToolCall(f"c{i}", tool, json.dumps(args))
        out += [Assistant(T, None, None, (call,)),
                ToolResult(T, i, call.id, result, ResultClass.PUBLIC, True, cut)]  # fmt: skip
    return out


def read(path: str, text: str, cut: bool = False) -> tuple[str, dict[str, object], str, bool]:
    return ("read_file", {"path": path}, text, cut)


def write(path: str, content: str) -> str:
    return json.dumps({"path": path, "content": content})


def test_a_write_that_loses_the_lines_read_is_held_with_them() -> None:
    said = hold(turn(STAMPS, read("todo.md", TODO)), "write_file",
                write("todo.md", "mow lawn\nfix tap\nbuy stamps"))  # fmt: skip
    assert said == (
        "not run: this would lose 2 of the 2 lines todo.md holds ('- mow lawn', '- fix tap'), "
        "and I asked for none to go. Call write_file on todo.md with every line of its text "
        "above, exactly as written there, changed only where I asked."
    )
    for spelled in ("./todo.md", "TODO.md"):  # the same file, another spelling
        assert hold(turn(STAMPS, read(spelled, TODO)), "write_file",
                    write("todo.md", "buy stamps")) is not None  # fmt: skip


@pytest.mark.parametrize(
    ("message", "calls", "content"),
    [
        pytest.param(STAMPS, [read("todo.md", TODO)], TODO + "- buy stamps\n", id="appended"),
        pytest.param("change the port in server.conf to 9090",
                     [read("server.conf", "name=garage\nport=8080\nlog=info\n")],
                     "name=garage\nport=9090\nlog=info", id="one-line-changed"),
        pytest.param("remove the first line of todo.md", [read("todo.md", TODO)], "- fix tap\n",
                     id="removal-asked"),
        pytest.param("empty todo.md and write 'empty' in it instead", [read("todo.md", TODO)],
                     "empty", id="rewrite-asked"),
        pytest.param("todo.md should say hi", [read("todo.md", TODO)], "x", id="no-change-asked"),
        pytest.param(STAMPS, [read("todo.md", TODO, cut=True)], "x", id="a-cut-read"),
        pytest.param(STAMPS, [("read_file", {"path": "todo.md", "offset": 5}, TODO, False)], "x",
                     id="a-window"),
        pytest.param(STAMPS, [read("todo.md", "error: todo.md: no such file or folder")], "x",
                     id="not-there"),
        pytest.param(STAMPS, [read("other.md", TODO)], "x", id="another-file-read"),
        pytest.param(STAMPS, [read("todo.md", "- mow lawn\n")], "x", id="one-line-file"),
    ],
)  # fmt: skip
def test_what_runs(
    message: str, calls: list[tuple[str, dict[str, object], str, bool]], content: str
) -> None:
    assert hold(turn(message, *calls), "write_file", write("todo.md", content)) is None


def test_the_text_known_follows_the_turns_edits_and_writes() -> None:
    edited = ("edit_file", {"path": "todo.md", "old": "fix tap", "new": "fix the tap"},
              "edited todo.md: now 26 bytes", False)  # fmt: skip
    calls = [read("todo.md", TODO), edited]
    kept = "- mow lawn\n- fix the tap\n- buy stamps\n"
    assert hold(turn(STAMPS, *calls), "write_file", write("todo.md", kept)) is None
    said = hold(turn(STAMPS, *calls), "write_file", write("todo.md", "buy stamps"))
    assert said is not None
    assert "('- mow lawn', '- fix the tap')" in said
    # a write of this turn replaced the owner's lines with the model's own: guest-count wrote
    # the names into count.txt, then the count over them, which must run
    written = ("write_file", {"path": "todo.md", "content": "a\nb\nc\n"}, "wrote todo.md", False)
    assert hold(turn(STAMPS, *calls, written), "write_file", write("todo.md", "d")) is None
    # an edit of text the turn did not see: what the file holds is no longer known
    blind = ("edit_file", {"path": "todo.md", "old": "zzz", "new": "y"}, "edited todo.md", False)
    assert hold(turn(STAMPS, *calls, blind), "write_file", write("todo.md", "x")) is None


@pytest.mark.parametrize(
    ("message", "held"),
    [
        ("Please read contacts.txt.", True),  # the tool model read it, then wrote it back
        ("could you tell me what's on the second line of todo.md?", True),
        ("what's the port in todo.md?", True),
        ("show me todo.md", True),
        ("read me the one from Tom", True),
        ("read names.txt and sort it", False),
        ("check todo.md and tick off the milk", False),
        ("what's the port in todo.md? change it to 9090", False),
        ("can you fix the typo in todo.md?", False),
        ("put 'buy stamps' at the end of todo.md", False),
        ("todo.md should say hello", False),  # neither a look nor a question: not judged
        ("I keep my contacts in todo.md.", False),
    ],
)
def test_a_write_when_the_owner_only_asked_to_look_is_held(message: str, held: bool) -> None:
    edit = json.dumps({"path": "todo.md", "old": "a", "new": "b"})
    for tool, args in (("write_file", write("todo.md", TODO)), ("edit_file", edit)):
        said = hold(turn(message, read("todo.md", TODO)), tool, args)
        if not held:
            assert said is None or not said.startswith("not run: I asked you to look"), message
            continue
        assert said == (
            "not run: I asked you to look, not to write: todo.md stays as it is. Answer my "
            "question in words from what you have read."
        ), message
