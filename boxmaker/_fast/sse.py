"""SSELineSplitter: `data:` payloads out of a text/event-stream, compiled or pure Python.

See `_sse_py.py` for the rules it follows; `_sse_c.pyx` is the same, scanning with memchr.
"""

from typing import TYPE_CHECKING

from . import IMPLEMENTATIONS, NO_EXTENSIONS

if TYPE_CHECKING or NO_EXTENSIONS:
    from ._sse_py import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES, SSELineSplitter

    IMPLEMENTATIONS["sse"] = "py"
else:
    from ._sse_c import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES, SSELineSplitter

    IMPLEMENTATIONS["sse"] = "c"

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "DEFAULT_MAX_LINE_BYTES", "SSELineSplitter"]
