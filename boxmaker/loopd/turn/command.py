"""`loopd turn`: one turn of a session, in this process, with no daemon.

    loopd turn --config <path> --session <id> [--new] --say <text> [--thinking|--no-thinking]

Opens the session under `[paths] home` (with `--new`, creates it: the baseline from
`[baseline] system`, the home's `memory/core.md` and the core tool schemas, checked against the
token budget with the server's tokenizer), runs one turn with the session's turn kit, as a
session worker does (turn/kit.py: the config's tools, brokerd at [tools] broker_socket, else
loopd's clock alone; an approval brokerd asks is shown on stderr and, unanswered here, denied; a
message too large for the slot refused before it is recorded), and prints each event, then the
outcome, as one JSON object per line on stdout, like `loopd complete`:

    {"type": "content", "text": "..."}                              an event, as the channel has it
    {"type": "turn_done", "content": "...", "usage": {...}}         exit 0
    {"type": "error", "code": "turn_limit", "message": "..."}       exit 1 (also on stderr)

The session's lock is held for the whole turn (the store's flock), so this can never write beside
a running worker: a session open elsewhere is `session_busy`, at once.
"""

from __future__ import annotations

import dataclasses
from typing import IO, Any

import orjson

from boxmaker.loopd.config import Config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.session_open import error_for, open_session
from boxmaker.loopd.tools.port import OnApproval
from boxmaker.loopd.turn.kit import TurnKit
from boxmaker.proto import (
    SessionIdError,
    TurnDone,
    TurnEvent,
    WireError,
    event_to_json,
)
from boxmaker.session.errors import (
    SessionError,
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


def _approval_shown(err: IO[str]) -> OnApproval:
    def show(_id: str, tool: str, summary: str) -> None:
        err.write(f"loopd turn: brokerd asks the owner about {tool}: {summary}\n")

    return show


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

    kit = TurnKit.from_config(config, client)  # as a session worker builds its own
    try:
        with open_session(config, client, session, new) as log:
            tools = kit.tools(log, session, _approval_shown(err))
            outcome = kit.turn(log, say, tools=tools, thinking=thinking, on_event=on_event)
    except (SessionError, SessionIdError, InferError) as exc:
        outcome = error_for(exc)
    _print(out, outcome_to_json(outcome))
    if isinstance(outcome, WireError):
        err.write(f"loopd turn: {outcome.code}: {outcome.message}\n")
        err.flush()
        return 1
    return 0
