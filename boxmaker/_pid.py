"""Whether a process is alive, by its pid: what `bxctl chat`'s tools line and `make run`'s wait
both ask of brokerd's state file."""

from __future__ import annotations

import os


def alive(pid: object) -> bool:
    """True for a running process's pid (another user's too), False for anything else."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # alive, another user's
    except OSError:
        return False
    return True
