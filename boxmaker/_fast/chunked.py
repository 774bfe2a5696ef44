"""ChunkedDecoder: the body out of an HTTP/1.1 chunked transfer coding, compiled or pure Python.

See `_chunked_py.py` for the rules it follows; `_chunked_c.pyx` is the same, scanning with memchr.
"""

from typing import TYPE_CHECKING

from . import IMPLEMENTATIONS, NO_EXTENSIONS

if TYPE_CHECKING or NO_EXTENSIONS:
    from ._chunked_py import DEFAULT_MAX_LINE_BYTES, ChunkedDecoder

    IMPLEMENTATIONS["chunked"] = "py"
else:
    from ._chunked_c import DEFAULT_MAX_LINE_BYTES, ChunkedDecoder

    IMPLEMENTATIONS["chunked"] = "c"

__all__ = ["DEFAULT_MAX_LINE_BYTES", "ChunkedDecoder"]
