"""Suite-wide hooks.

When the real llama-server cannot be built or started, every test that needs it fails; the first
one shows the whole cause (the smoke test's finding and the log tail) and every later one is cut
to one line that points at it, so a broken machine reads as one failure, not fifty copies of it.

Every test that starts a real llama-server is marked `model`: `make test` runs the others in two
workers, then these alone (tests/support/model_group.py).
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.support import model_group
from tests.support.llama import LlamaServerError

_first_unavailable: str | None = None


@pytest.hookimpl(tryfirst=True)  # the marks first: -m selects by them
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    model_group.check(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    model_group.running(item.nodeid)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    global _first_unavailable
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not call.excinfo.errisinstance(LlamaServerError):
        return
    cause = str(call.excinfo.value).splitlines()[0]
    if _first_unavailable is None:
        _first_unavailable = item.nodeid
        return
    report.longrepr = f"llama-server is unavailable (in full at {_first_unavailable}): {cause}"
