"""Fixtures for the twin tests in tests/fast, by hot path (the sse ones start with its name)."""

from collections.abc import Iterator

import pytest

from boxmaker._fast import _splice_c, _splice_py, _sse_c, _sse_py
from tests.support.fast.splice import ROUTES, Pump, Sockets
from tests.support.fast.worker import Worker

# --- sse ---------------------------------------------------------------------------------------

PySSELineSplitter = _sse_py.SSELineSplitter
CSSELineSplitter = _sse_c.SSELineSplitter


@pytest.fixture(params=[PySSELineSplitter, CSSELineSplitter], ids=["py", "c"])
def sse_cls(request: pytest.FixtureRequest) -> type[PySSELineSplitter] | type[CSSELineSplitter]:
    """Each SSELineSplitter twin in turn, imported directly (the selector is not involved)."""
    cls: type[PySSELineSplitter] | type[CSSELineSplitter] = request.param
    return cls


# --- splice ------------------------------------------------------------------------------------
# (`pump` is each twin; `sockets` makes connected pairs and tears them down after the test;
# `kind` and `unix_src` are the routes, see tests/support/fast/splice.ROUTES.)


@pytest.fixture(params=[_splice_py.pump, _splice_c.pump], ids=["py", "c"])
def pump(request: pytest.FixtureRequest) -> Pump:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def sockets() -> Iterator[Sockets]:
    Worker.started.clear()
    made = Sockets()
    yield made
    made.close()
    Worker.started.clear()


@pytest.fixture(params=ROUTES)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=["unix", "unix>tcp"])
def unix_src(request: pytest.FixtureRequest) -> str:
    """Routes from a Unix socket: to a Unix socket (splice) and to TCP (read/write)."""
    return request.param  # type: ignore[no-any-return]
