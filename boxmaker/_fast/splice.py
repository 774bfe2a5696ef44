"""pump(src_fd, dst_fd): the byte splice under inferproxy, compiled (splice(2)) or pure Python.

See `_splice_py.py` for the contract both twins keep. `_splice_c.pyx` moves the bytes without
the GIL, with splice(2) through a pipe, or with a read/write loop from a Unix socket to TCP,
where that measured cheaper (its docstring has the figures). METHOD names the mechanism for
the daemon's start line.
"""

from typing import TYPE_CHECKING

from . import IMPLEMENTATIONS, NO_EXTENSIONS

if TYPE_CHECKING or NO_EXTENSIONS:
    from ._splice_py import METHOD, pump

    IMPLEMENTATIONS["splice"] = "py"
else:
    from ._splice_c import METHOD, pump

    IMPLEMENTATIONS["splice"] = "c"

__all__ = ["METHOD", "pump"]
