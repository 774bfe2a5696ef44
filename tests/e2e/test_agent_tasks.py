"""`make test`'s fixed subset of the owner-task suite (issue 40.1; the whole suite, beside the
stock-framework floor, is `make agent-tasks`): a read, a count and an approved copy, each in a
fresh session on the tool model's stack (conftest.py), judged as the suite judges them, from
the disk, brokerd's decision log and the session's calls."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.verify.device import Run
from tests.support.agent.run import lay, pages, run_box
from tests.support.agent.tasks import SMOKE, TASKS, Call, Outcome, Task, by_name


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with pages() as base:
        yield base


@pytest.mark.parametrize("task", by_name(SMOKE), ids=SMOKE)
def test_an_owner_task_runs_through_the_stack_and_is_judged(
    tool_model: Run, url: str, task: Task, capsys: pytest.CaptureFixture[str]
) -> None:
    """The task through the real stack: every call got its result, no turn ended in an error
    but the turn limits, and the judge's verdict is printed. Not asserted: the pass itself; on
    2 shared cores the model passed none of these (docs/decisions/agent-tasks.md), and the
    figures belong to `make agent-tasks`, not to make test's verdict."""
    try:
        outcome = run_box(tool_model, task, url, f"task-{task.name}")
    finally:  # the stack is shared: the task's files would be in the later tests' listings
        for child in tool_model.stack.workspace.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    assert len(outcome.answers) == len(task.turns)
    assert all(c.result for c in outcome.calls), outcome.calls
    assert all("turn_limit" in e for e in outcome.errors), outcome.errors
    with capsys.disabled():
        print(f"\n{task.name}: {'PASS' if outcome.why is None else 'FAIL: ' + outcome.why}; "
              f"calls {[c.tool for c in outcome.calls]}")  # fmt: skip


def test_every_task_fails_when_nothing_was_done(tmp_path: Path) -> None:
    """No task passes on words alone: with the files laid, no call made and the answer "Done.",
    every judge finds something missing (the disk, brokerd's log or a call)."""
    for task in TASKS:
        lay(task, tmp_path)
        outcome = Outcome(["Done."] * len(task.turns), [], tmp_path, tmp_path / "memory")
        assert task.judge(outcome) is not None, task.name
    assert len(TASKS) >= 30
    assert {t.kind for t in TASKS} >= {
        "read",
        "find",
        "list",
        "write",
        "refused",
        "missing",
        "two-step",
        "note",
        "time",
        "shell",
        "fetch",
        "multi-turn",
    }


def test_a_task_passes_on_what_the_disk_and_the_calls_show(tmp_path: Path) -> None:
    (copy,) = by_name(["copy"])
    lay(copy, tmp_path)
    (tmp_path / "todo-backup.txt").write_text((tmp_path / "todo.txt").read_text())
    read = Call("read_file", {"path": "todo.txt"}, (tmp_path / "todo.txt").read_text())
    outcome = Outcome(["Copied."], [read], tmp_path, tmp_path / "memory", approvals=["yes"])
    assert copy.judge(outcome) is None
    outcome.approvals = []  # brokerd's log shows no approval: the write did not go through it
    assert copy.judge(outcome) is not None


def test_capital_letters_asked_are_judged_case_by_case(tmp_path: Path) -> None:
    """title-upper passed on the title as book.md writes it until 2026-12-04 (the judge folded
    case); asked for capitals, only capitals pass."""
    (title,) = by_name(["title-upper"])
    lay(title, tmp_path)
    read = Call("read_file", {"path": "book.md"}, (tmp_path / "book.md").read_text())
    outcome = Outcome(["Done."], [read], tmp_path, tmp_path / "memory", approvals=["yes"])
    (tmp_path / "title.txt").write_text("# The Silent Harbour\n")
    assert title.judge(outcome) is not None
    (tmp_path / "title.txt").write_text("THE SILENT HARBOUR\n")
    assert title.judge(outcome) is None
