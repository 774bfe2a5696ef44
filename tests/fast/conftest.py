"""Fixtures for the twin tests in tests/fast; each hot path's fixture names start with its name."""

import pytest

from boxmaker._fast import _sse_c, _sse_py

# --- sse ---------------------------------------------------------------------------------------

PySSELineSplitter = _sse_py.SSELineSplitter
CSSELineSplitter = _sse_c.SSELineSplitter


@pytest.fixture(params=[PySSELineSplitter, CSSELineSplitter], ids=["py", "c"])
def sse_cls(request: pytest.FixtureRequest) -> type[PySSELineSplitter] | type[CSSELineSplitter]:
    """Each SSELineSplitter twin in turn, imported directly (the selector is not involved)."""
    cls: type[PySSELineSplitter] | type[CSSELineSplitter] = request.param
    return cls
