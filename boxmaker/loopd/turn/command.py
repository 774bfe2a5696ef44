"""`loopd turn`: one turn of a session, in this process, with no daemon.

    loopd turn --config <path> --session <id> [--new] --say <text> [--thinking|--no-thinking]

Opens the session under `[paths] home` (with `--new`, creates it: the baseline from
`[baseline] system`, the home's `memory/core.md` and the core tool schemas, checked against the
token budget with the server's tokenizer), runs one turn with FakeTools as the port, and prints
each event, then the outcome, as one JSON object per line on stdout, like `loopd complete`:

    {"type": "content", "text": "..."}                              an event, as the channel has it
    {"type": "turn_done", "content": "...", "usage": {...}}         exit 0
    {"type": "error", "code": "turn_limit", "message": "..."}       exit 1 (also on stderr)

The session's lock is held for the whole turn (the store's flock), so this can never write beside
a running worker: a session open elsewhere is `session_busy`, at once.
"""

from __future__ import annotations

import dataclasses
from typing import IO, Any, Protocol, runtime_checkable

import orjson

from boxmaker.loopd.config import Config, InferenceConfig
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.tools.port import FakeTools, utc_now
from boxmaker.loopd.tools.registry import CORE_SCHEMAS
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import (
    ErrorCode,
    SessionIdError,
    TurnDone,
    TurnEvent,
    WireError,
    event_to_json,
)
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


def outcome_to_json(outcome: TurnDone | WireError) -> dict[str, Any]:
    """The last line: `turn_done` with its body, or `error` with code and message."""
    if isinstance(outcome, TurnDone):
        return {
            "type": "turn_done",
            "content": outcome.content,
            "usage": dataclasses.asdict(outcome.usage),
        }
    return {"type": "error", **outcome.to_json()}


def _print(out: IO[str], obj: dict[str, Any]) -> None:
    out.write(orjson.dumps(obj).decode() + "\n")
    out.flush()  # a watcher sees each event as it happens


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
    baseline = assemble_baseline(config.baseline.system, config.paths.home, CORE_SCHEMAS)
    check_budget(baseline, lambda text: len(client.tokenize(text)))
    slot = choose_slot(config.inference, client.gate)
    return store.create(session, baseline, slot=slot, time=utc_now())


def run_turn_command(
    config: Config,
    *,
    session: str,
    new: bool,
    say: str,
    thinking: bool | None,
    out: IO[str],
    err: IO[str],
) -> int:
    """Runs one turn and prints its lines; returns 0 on `turn_done`, else 1. `thinking` None is
    the config's `[loop] thinking`."""
    client = Client(config.inference)

    def on_event(event: TurnEvent) -> None:
        _print(out, event_to_json(event))

    try:
        with open_session(config, client, session, new) as log:
            outcome = run_turn(
                log,
                say,
                client=client,
                port=FakeTools(),
                config=config.loop,
                thinking=config.loop.thinking if thinking is None else thinking,
                on_event=on_event,
            )
    except (SessionError, SessionIdError, InferError) as exc:
        outcome = error_for(exc)
    _print(out, outcome_to_json(outcome))
    if isinstance(outcome, WireError):
        err.write(f"loopd turn: {outcome.code}: {outcome.message}\n")
        err.flush()
        return 1
    return 0
