"""brokerd's state file: its name and its one JSON object (issue 39 items 3 and 4). No I/O.

brokerd writes it beside its socket at each start (brokerd/state.py); `make run`'s wait
(verify/ready.py), the chat's tools line and `make status` (bxctl/stack.py) read it, so what
they show is this brokerd's state, never an older brokerd's log line:

    {"state": "ready", "pid": 1234, "at": 1767225600.0, "tools": ["read_file", ...],
     "workspace": "/path", "shell": "sandbox ready" | "off: <why>"}
    {"state": "failed", "pid": 1234, "at": ..., "error": "<path>: <what>; <what to do>"}
    {"state": "starting", "pid": ..., "at": ..., "last_failure": "<the failed start's error>"}
    {"state": "stopped", "pid": ..., "at": ...}

`last_failure` is kept from a failed start to the next start, so a brokerd that supervisord
restarts over and over reads as failing, not as starting; a `ready` clears it.
"""

from __future__ import annotations

from typing import Any

import orjson

NAME = "brokerd.state"
MAX_BYTES = 65_536
STARTING, READY, FAILED, STOPPED = "starting", "ready", "failed", "stopped"
STATES = (STARTING, READY, FAILED, STOPPED)


def decode(data: bytes) -> dict[str, Any] | None:
    """The state object, or None when `data` is not one."""
    if len(data) > MAX_BYTES:
        return None
    try:
        state = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(state, dict) or state.get("state") not in STATES:
        return None
    return state


def encode(state: str, pid: int, at: float, old: dict[str, Any] | None, **fields: Any) -> bytes:
    """The object for `state`, carrying the last failure from `old` into a new start."""
    record: dict[str, Any] = {"state": state, "pid": pid, "at": at, **fields}
    if state == STARTING and old is not None:
        failure = old.get("error") if old["state"] == FAILED else old.get("last_failure")
        if failure:
            record["last_failure"] = failure
    return orjson.dumps(record)


def failure(state: dict[str, Any]) -> str | None:
    """Why this brokerd cannot start (its failed start, or the one before its new start)."""
    if state["state"] == FAILED:
        return str(state.get("error") or "no reason given")
    if state["state"] == STARTING and state.get("last_failure"):
        return str(state["last_failure"])
    return None
