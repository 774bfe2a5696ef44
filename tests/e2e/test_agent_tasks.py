"""`make test`'s fixed subset of the owner-task suite (issue 40.1; the whole suite, beside the
stock-framework floor, is `make agent-tasks`): a read, a count and an approved copy, each in a
fresh session on the tool model's stack (conftest.py), judged as the suite judges them, from
the disk, brokerd's decision log and the session's calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from boxmaker.verify.device import Run
from tests.support.agent_run import pages, run_box
from tests.support.agent_tasks import SMOKE, Task, by_name


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with pages() as base:
        yield base


@pytest.mark.parametrize("task", by_name(SMOKE), ids=SMOKE)
def test_an_owner_task_passes(tool_model: Run, url: str, task: Task) -> None:
    outcome = run_box(tool_model, task, url, f"task-{task.name}")
    why = task.judge(outcome)
    assert why is None, f"{why}; calls {[c.tool for c in outcome.calls]}; {outcome.answers}"
