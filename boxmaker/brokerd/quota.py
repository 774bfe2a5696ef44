"""The shell's per-call write quota: what one call adds to the workspace, counted as it runs
(sandbox.py asks `over()` whenever `next_check` has come)."""

from __future__ import annotations

import time

from boxmaker.brokerd.tree import WalkFailed, tree_bytes

QUOTA_CHECK_S = 0.1  # how often a running command's workspace writes are counted, at least


class WriteQuota:
    """What one call adds to the workspace (allocated bytes: tree_bytes now less before), checked
    every QUOTA_CHECK_S as the command runs, or less often on a workspace whose walk takes long
    (at most a fifth of the time is spent walking). A command can pass the quota by what it
    writes between two checks; then it is killed. A folder the walk can neither enter nor make
    enterable means what is in it cannot be counted: `failed` says which, and the quota is
    taken as passed (counting less than was written is what the quota exists to prevent)."""

    def __init__(self, top: str, limit: int) -> None:
        self.top, self.limit = top, limit
        self.failed: str | None = None
        self.base = self._walk()
        self.used = 0
        self.next_check = time.monotonic() + QUOTA_CHECK_S

    def _walk(self) -> int:
        try:
            return tree_bytes(self.top)
        except WalkFailed as exc:
            self.failed = str(exc)
            return 0
        except OSError:  # the workspace itself is gone: nothing to count in it
            return 0

    def over(self) -> bool:
        began = time.monotonic()
        self.used = max(0, self._walk() - self.base)
        spent = time.monotonic() - began
        self.next_check = time.monotonic() + max(QUOTA_CHECK_S, 4 * spent)
        return self.used > self.limit or self.failed is not None
