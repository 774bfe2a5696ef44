"""Which tests start a real llama-server, so `make test`'s parallel run (pytest-xdist with
`--dist loadfile`) gives them all to one worker, first: two model servers on two cores at once
would each run at half speed and share nothing, and a session- or package-scoped real stack is
started once, on the worker that needs it.

`Scheduling` is xdist's file scheduling with every module listed here as one unit, sent before
any other. (xdist's own `--dist loadgroup` cannot do it under pytest 9: it renames the node id
through an attribute pytest no longer reads.) A module that takes a real stack's fixture must be
listed (`check`, at every collection), and `ensure_built()`, which every real llama-server start
goes through, refuses to run for a test outside the list in a parallel run: a new real-model test
cannot slip into the other worker unnoticed; either failure says the line to add."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest
from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

GROUP = "model"

# Every module with a test that starts a real llama-server, itself or through a fixture.
MODULES = frozenset(
    {
        "tests/e2e/test_agent_tasks.py",
        "tests/e2e/test_gateway_approval.py",
        "tests/e2e/test_gateway_stack.py",
        "tests/e2e/test_gateway_token.py",
        "tests/e2e/test_local_stack.py",
        "tests/e2e/test_thinking_default.py",
        "tests/e2e/test_tool_model.py",
        "tests/e2e/test_tool_model_checks.py",
        "tests/e2e/test_tool_model_mcp.py",
        "tests/loopd/cache/test_real_epochs.py",
        "tests/loopd/cache/test_real_slot_cache.py",
        "tests/loopd/cache/test_real_slots.py",
        "tests/loopd/llama/test_llama_harness.py",
        "tests/loopd/llama/test_real_server.py",
        "tests/loopd/test_baseline_budget.py",
        "tests/loopd/test_cli.py",
        "tests/loopd/turn/test_real_compact.py",
        "tests/loopd/turn/test_real_long_message.py",
        "tests/loopd/turn/test_real_turn.py",
        "tests/reliability/test_llama_restart.py",
        "tests/verify/test_device_real.py",
        "tests/verify/test_proxy_budget.py",
        "tests/verify/test_run_failfast.py",
    }
)

# Fixtures that start (or hand out) a real model server, by the conftest that defines them
# ("stack" is also the name of other rigs' fixtures).
FIXTURES = frozenset(
    {
        ("tests.loopd.conftest", "stacks"),
        ("tests.loopd.conftest", "stack"),
        ("tests.loopd.conftest", "single_stack"),
        ("tests.loopd.conftest", "router_stack"),
        ("tests.e2e.conftest", "tool_model"),
    }
)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].split("@", 1)[0]


def check(items: Sequence[pytest.Item]) -> None:
    """Raises when a test takes a real stack's fixture and its module is not listed."""
    missing = sorted(
        {
            module_of(item.nodeid)
            for item in items
            if module_of(item.nodeid) not in MODULES and FIXTURES & set(_fixtures(item))
        }
    )
    if missing:
        raise pytest.UsageError(
            f"{', '.join(missing)} take a real llama-server's fixture: add them to MODULES in "
            "tests/support/model_group.py"
        )


def _fixtures(item: pytest.Item) -> list[tuple[str, str]]:
    """(defining module, name) of each fixture the test takes."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [
        (defs[-1].func.__module__, name)
        for name, defs in info.name2fixturedefs.items()
        if defs and hasattr(defs[-1].func, "__module__")
    ]


class Scheduling(LoadFileScheduling):
    """One unit per test file, but the listed modules together, and that unit first: it is the
    longest, so the other worker works through the rest beside it."""

    def _split_scope(self, nodeid: str) -> str:
        module = module_of(nodeid)
        return GROUP if module in MODULES else module

    def _assign_work_unit(self, node: WorkerController) -> None:
        if GROUP in self.workqueue:
            self.workqueue.move_to_end(GROUP, last=False)
        super()._assign_work_unit(node)


_current: str | None = None  # the running test's node id


def running(nodeid: str) -> None:
    global _current
    _current = nodeid


def require() -> None:
    """Raises when a real llama-server is about to start for a test outside the list, in a
    parallel run (in a plain run every test is on the one process anyway)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or _current is None:
        return
    module = module_of(_current)
    if module not in MODULES:
        raise RuntimeError(
            f"{_current} starts a real llama-server but its module is not in the {GROUP!r} "
            f"unit of the parallel run: add {module!r} to MODULES in tests/support/model_group.py"
        )
