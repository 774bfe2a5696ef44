"""The tool model through the whole stack (issue 28.3): `bxctl chat` -> loopd -> brokerd -> the
workspace, on the qwen-coder profile's real llama-server (Qwen2.5-Coder-1.5B, fetched once per
machine by scripts/fetch_tool_model.sh), as verify-device starts it (boxmaker/verify/stack.py:
supervisord, brokerd with its own workspace and grants, inferproxy, loopd). One stack for the
module; every turn a fresh session with a short prompt.

A turn per tool family (files: an edit, beside verify-device's read, list and write on this
model; note, shell, fetch), each judged on the session's records (the
call, its ToolResult's content), the answer, and what landed on disk (the file, the note) or in
brokerd's decision log; the prompts for note, shell and fetch (behind find_tool/call_tool in this
profile) name the tool, as a user of a small model learns to: unnamed, it answered "I have noted
that ..." with no call, and "run ls" with list_dir; the approvals answered through `bxctl chat
--owner-socket` (yes, and a no that leaves no file and lets the turn go on); and the
repeated-call loop this model falls into when brokerd's tools sit behind call_tool (it guesses
write_file's arguments), stopped by the M2b repeat rule (`loopd turn` on a second config of the
same stack).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Iterator

import orjson
import pytest

from boxmaker._toml import toml_dumps
from boxmaker.proto import Assistant, ToolResult
from boxmaker.verify.device import Run
from tests.support.agent.tool_model import TOOL_TURN_S, approvals, results_of, turn
from tests.support.web import page_server

PAGE = b"<html><body><h1>Harbour tides</h1><p>High water at 06:40.</p></body></html>"


@pytest.fixture(scope="module")
def page() -> Iterator[int]:
    with page_server(PAGE) as port:
        yield port


@pytest.fixture
def run(tool_model: Run) -> Run:
    return tool_model  # conftest.py: one stack for the package


def test_an_approved_edit_changes_the_file(run: Run) -> None:
    """The files family's edit (read_file, list_dir and write_file on this model are
    verify-device's checks, test_tool_model_checks.py, through the same bxctl chat): the
    approved edit_file's result, the bytes on disk with only the asked part changed, brokerd's
    log holding the owner's yes."""
    path = run.stack.workspace / "shopping.txt"
    path.write_text("eggs\nflour\nmilk\n")
    _, records = turn(run, "edit", 'In the file shopping.txt, replace "flour" with "sugar".',
                      approve="yes\n")  # fmt: skip
    edited = results_of(records, "edit_file")
    assert edited, records
    assert edited[0].content.startswith("edited "), edited
    assert path.read_text() == "eggs\nsugar\nmilk\n"
    assert approvals(run, "edit_file", "edit")[:1] == [
        "yes"
    ]  # answered on owner.sock by bxctl chat


def test_a_refused_write_leaves_no_file_and_the_turn_goes_on(run: Run) -> None:
    path = run.stack.workspace / "refused.txt"
    _, records = turn(run, "refused-write", 'Write the text "nope" to the file refused.txt.',
                           approve="no\nno\nno\n")  # fmt: skip
    written = results_of(records, "write_file")
    assert written, records
    assert all(not r.content.startswith("wrote ") for r in written), written
    assert any("denied" in r.content for r in written), written
    assert not path.exists()
    assert "no" in approvals(run, "write_file", "refused-write")
    # the turn went on: the model was asked again after the refusal (an answer, or another call
    # such as a note of the refusal, which the profile's prompt now tends to make)
    after = records[next(i for i, r in enumerate(records) if r is written[0]) + 1 :]
    shown = [(type(r).__name__, str(getattr(r, "content", ""))[:120]) for r in records]
    assert any(isinstance(r, Assistant) for r in after), shown


def test_note_lands_in_a_memory_file(run: Run) -> None:
    """The model picks the file (it chose core.md, which always asks); the approved note is in
    it. Seen: the same note call again after the result, refused by the repeat rule, so the turn
    may end without an answer; the note is kept once."""
    _, records = turn(
        run, "note", "Use the note tool to keep this note: the boiler is serviced in May.", "yes\n"
    )
    noted = results_of(records, "note")
    assert noted, records
    assert noted[0].content.startswith("noted in memory/"), noted
    name = noted[0].content.removeprefix("noted in ").strip()
    assert (run.stack.home / name).read_text().lower().count("boiler") == 1
    assert approvals(run, "note", "note")[:1] == ["yes"]


def test_shell_lists_the_workspace(run: Run) -> None:
    (run.stack.workspace / "ledger-2291.csv").write_text("a,b\n")
    _, records = turn(run, "shell", "Use the shell tool to run ls and show me its output.", "yes\n")
    ran = results_of(records, "shell")
    assert ran, records
    assert "ledger-2291.csv" in ran[0].content, ran  # run in brokerd's sandbox, in the workspace
    assert approvals(run, "shell", "shell")[:1] == ["yes"]
    # Not asserted: the answer. Of two runs one quoted the listing and one said only "The shell
    # command `ls` executed successfully, listing the files in the current directory."


def test_fetch_reads_a_local_page(run: Run, page: int) -> None:
    """The page's text comes back through brokerd's fetch (an ask grant naming 127.0.0.1)."""
    url = f"http://127.0.0.1:{page}/"
    _, records = turn(
        run, "fetch", f"Use the fetch tool to fetch {url} and tell me its heading.", "yes\n"
    )
    fetched = results_of(records, "fetch")
    assert fetched, records
    assert "Harbour tides" in fetched[0].content, fetched
    assert fetched[0].untrusted, fetched  # a page taints the session
    # Not asserted: the answer. Seen once: after the page the model called note("Harbour
    # tides") again and again (asked because of the taint, unanswered, denied) until the repeat
    # rule ended the turn with no answer.


def test_the_repeat_rule_stops_the_call_tool_loop(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    """With brokerd's tools behind call_tool (`[tools] core = ["clock"]`) this model guesses
    write_file's arguments ({"file": ...}) and, after the errors, sends the same call again: the
    first repeat is not run and says so; the second ends the turn with turn_limit, unless the
    model stops calling after the first. Either way the loop is stopped and nothing is written.
    The M2b rule alone: the profile's nudge is off here (with it, the round after a repeat gets
    the next step, turn.stuck, tested in tests/loopd/turn/test_stuck.py). What the model did
    after the first refusal is printed (the figure in docs/decisions/core-tools.md)."""
    table = tomllib.loads(run.stack.config_path.read_text())
    table["tools"]["core"] = ["clock"]
    table.setdefault("loop", {})["nudge"] = False
    config = run.stack.run / "behind-call-tool.toml"
    config.write_text(toml_dumps(table))
    p = subprocess.run(
        [sys.executable, "-m", "boxmaker.loopd", "turn", "--config", str(config), "--session",
         "repeat", "--new", "--say", 'Write the text "hello" to the file loop.txt.'],
        capture_output=True, text=True, timeout=TOOL_TURN_S, check=False,
    )  # fmt: skip
    lines = [orjson.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    records = run.records("repeat")
    contents = [r.content for r in records if isinstance(r, ToolResult)]
    refused = [i for i, c in enumerate(contents) if c.startswith("not run: this call repeats")]
    with capsys.disabled():
        after = contents[refused[0] + 1 :] if refused else []
        print(
            f"\nrepeat rule: {len(contents)} results, repeats refused at {refused}; after the "
            f"first refusal the model made {len(after)} more calls; outcome {lines[-1:]}"
        )
    if not refused:
        pytest.fail(f"the model did not repeat a call this time (nothing to stop): {contents}")
    if lines[-1]["type"] == "turn_done":  # it stopped calling after the first refusal
        assert p.returncode == 0, p.stdout + p.stderr
        assert refused == [len(contents) - 1], contents  # no call after it
    else:
        assert p.returncode == 1, p.stdout + p.stderr
        assert lines[-1]["type"] == "error", lines[-1]
        assert lines[-1]["code"] == "turn_limit", lines[-1]
        assert "repeat" in lines[-1]["message"], lines[-1]
        assert len(refused) == 2, contents  # the second repeat ends the turn
    assert not (run.stack.workspace / "loop.txt").exists()
