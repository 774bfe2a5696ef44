"""`make test`'s fixed subset of the owner-task suite (issue 40.1; the whole suite, beside the
stock-framework floor, is `make agent-tasks`): a read, a count and an approved copy, each in a
fresh session on the tool model's stack (conftest.py), judged as the suite judges them, from
the disk, brokerd's decision log and the session's calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.verify.device import Run
from tests.support.agent_run import lay, pages, run_box
from tests.support.agent_tasks import SMOKE, TASKS, Call, Outcome, Task, by_name


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with pages() as base:
        yield base


@pytest.mark.parametrize("task", by_name(SMOKE), ids=SMOKE)
def test_an_owner_task_passes(tool_model: Run, url: str, task: Task) -> None:
    outcome = run_box(tool_model, task, url, f"task-{task.name}")
    assert outcome.why is None, (
        f"{outcome.why}; calls {[c.tool for c in outcome.calls]}; {outcome.answers}"
    )


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
