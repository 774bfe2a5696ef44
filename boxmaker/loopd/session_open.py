"""Opening a session, for `loopd turn` and the session worker alike (issue 20, item 1).

`open_session` creates (the baseline from `[baseline] system`, the home's `memory/core.md` and the
core tool schemas, checked against the token budget with the server's tokenizer, on the slot
`choose_slot` gives) or resumes a session's log, open and locked; `error_for` turns the store's
refusals and the inference path's failures into the channel's errors (`_CODES`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from boxmaker.loopd.config import Config, InferenceConfig
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.tools.port import baseline_tools, utc_now
from boxmaker.proto import ErrorCode, SessionIdError, WireError
from boxmaker.session.baseline import assemble_baseline, check_budget
from boxmaker.session.errors import (
    NoSuchSession,
    SessionBusy,
    SessionError,
    SessionExists,
)
from boxmaker.session.store import SessionLog, SessionStore

# The store's refusals, as the channel's codes.
_CODES: tuple[tuple[type[Exception], ErrorCode], ...] = (
    (SessionIdError, ErrorCode.BAD_REQUEST),
    (SessionBusy, ErrorCode.SESSION_BUSY),
    (NoSuchSession, ErrorCode.NO_SUCH_SESSION),
    (SessionExists, ErrorCode.SESSION_EXISTS),
    (InferError, ErrorCode.INFERENCE),
    (SessionError, ErrorCode.INTERNAL),
)


def error_for(exc: SessionError | SessionIdError | InferError) -> WireError:
    """The channel's error for a refusal of the store or a failure of the inference path."""
    code = next(c for kind, c in _CODES if isinstance(exc, kind))
    text = exc.describe() if isinstance(exc, InferError) else str(exc)
    return WireError(code, text)


@runtime_checkable
class Picker(Protocol):
    """A gate that can choose a new session's slot (SlotGate, and the worker's PipeGate)."""

    def pick(self, slots: tuple[int, ...]) -> int: ...


def choose_slot(config: InferenceConfig, gate: object) -> int:
    """A new session's slot: the gate's pick, with [inference] slot_choice "spread"."""
    if config.slot_choice == "spread" and isinstance(gate, Picker):
        return gate.pick(config.slots)
    return config.slots[0]


def open_session(config: Config, client: Client, session: str, new: bool) -> SessionLog:
    """The session's log, open and locked: created when `new` (it must not exist), else opened.
    A new session's slot is `choose_slot`'s, asked once the budget check has passed.

    Raises:
        SessionError: busy, missing, existing (when `new`), or unreadable; SessionIdError: a bad
            id; InferError: the budget check could not reach the server.
    """
    store = SessionStore(config.paths.home)  # checks the id before any path is built
    if not new:
        return store.open(session)
    if store.exists(session):
        raise SessionExists(f"session {session} already exists; leave out --new to resume it")
    tools = baseline_tools(config.tools)  # [tools] core, then find_tool and call_tool
    baseline = assemble_baseline(config.baseline.system, config.paths.home, tools)
    check_budget(baseline, lambda text: len(client.tokenize(text)))
    slot = choose_slot(config.inference, client.gate)
    return store.create(session, baseline, slot=slot, time=utc_now())
