"""brokerd's state file, written (the format is proto/brokerd_state.py): `starting` once the
config is read, then `ready` (listening, with its tools) or `failed` (why not), `stopped` at
exit. The file lives beside brokerd's socket and is replaced whole, so a reader never sees half."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from boxmaker.proto.brokerd_state import FAILED, NAME, READY, STARTING, STOPPED, decode, encode

__all__ = ["FAILED", "READY", "STARTING", "STOPPED", "state_path", "write_state"]


def state_path(socket: str) -> str:
    """Where the brokerd serving `socket` ([broker] socket) writes its state: beside it."""
    return os.path.join(os.path.dirname(os.path.abspath(socket)), NAME)


def write_state(path: str, state: str, **fields: Any) -> None:
    """A folder it cannot write loses the state and nothing else: brokerd serves on."""
    old = None
    with contextlib.suppress(OSError), open(path, "rb") as f:
        old = decode(f.read(1 << 16))
    tmp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(OSError):
        with open(tmp, "wb") as f:
            f.write(encode(state, os.getpid(), time.time(), old, **fields))
        os.replace(tmp, path)
