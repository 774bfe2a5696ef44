"""Which tests start a real llama-server. `make test` runs the others first, in two xdist workers
(`-m "not model" -n 2`), then these in one process (`-m model`): llama.cpp's threads wait on
each other, so a model server that shares its two cores with a second worker ran its tests at
half speed (tests/e2e's 2.1 times, 1,692 s of model tests against 828 s alone), and the run as a
whole gained nothing.

Every test of a module listed here is marked `model` at collection. A module whose tests take a
real stack's fixture must be listed (`check`), and `ensure_built()`, which every real
llama-server start goes through, refuses to run in an xdist worker (`require`): a new real-model
test cannot slip into the parallel half unnoticed; either failure says the line to add."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest

MARK = "model"

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
    """Marks the listed modules' tests `model`; raises when a test takes a real stack's fixture
    and its module is not listed."""
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
    for item in items:
        if module_of(item.nodeid) in MODULES:
            item.add_marker(MARK)


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


_current: str | None = None  # the running test's node id


def running(nodeid: str) -> None:
    global _current
    _current = nodeid


def require() -> None:
    """Raises when a real llama-server is about to start in an xdist worker: the parallel half
    of `make test` runs no real-model test."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    module = module_of(_current or "")
    raise RuntimeError(
        f"{_current} starts a real llama-server in a parallel worker: add {module!r} to MODULES "
        "in tests/support/model_group.py (make test runs those alone, after the rest)"
    )
