"""What brokerd decided about a session's tool calls, from its decision log, for `bxctl history`
(issue 30 item 4: approvals).

The session's own log does not say that a call was asked: an approved call's ToolResult is the
tool's result, and only a denial's text names the answer. brokerd's decision log does: for each
call a `request` (session, epoch, tool, arguments), its `decision` (allow, ask or deny, and why),
and for an asked call its `approval` (the answer: yes, no, always, empty; timeout when brokerd's
approval wait ended; closed when the owner's chat went away unanswered; or why it could not be
asked). bxctl reads it when it can (the same uid as brokerd, as under `make run`), checking its
hash chain as `bxctl verify-broker` does; brokerd run as a user of its own keeps it from bxctl,
and history then says approvals are not shown, and why.

Which log: `--broker-log`, else $BOXMAKER_BROKER_LOG, else the `[broker] log` of the brokerd
config `make run` recorded in run.env (stack.py), when the home is make run's own.

A call in the session's log is paired with brokerd's request of the same epoch, tool and
arguments (the JSON compared as values), the first not yet paired, in order; a `call_tool` call is
brokerd's request of the tool it names. loopd's own tools (clock, recall, find_tool) have none.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from boxmaker.proto import ToolCall
from boxmaker.session.chain import ChainError
from boxmaker.session.chain_files import archives, verify_files
from boxmaker.session.errors import SessionError
from boxmaker.session.files import read_regular

from .stack import RUN_ENV, RUN_ENV_NAME, checkout_run_folder, read_run_env

BROKER_LOG_ENV = "BOXMAKER_BROKER_LOG"
BROKERD_CONFIG_ENV = "BOXMAKER_BROKERD_CONFIG"
OWNER_ANSWERS = frozenset({"yes", "no", "always", "empty"})
APPROVING = frozenset({"yes", "always"})


@dataclass(frozen=True, slots=True)
class Asked:
    """brokerd's account of one call of the session: what the grants said and, when it asked,
    the answer."""

    id: str
    epoch: int
    tool: str
    arguments: str
    time: str
    mode: str  # allow | ask | deny (the grants' decision)
    reason: str
    answer: str | None  # the approval's answer, None when nobody was asked
    approved: bool  # whether the call ran past brokerd's decision

    @property
    def by(self) -> str:
        """Who decided: `grants`, `owner`, `timeout` (nobody answered in time), `closed` (the
        owner's chat went away unanswered) or `brokerd` (it could not be asked)."""
        if self.answer is None:
            return "grants"
        if self.answer in OWNER_ANSWERS:
            return "owner"
        if self.answer in ("timeout", "closed"):
            return self.answer
        return "brokerd"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "decision": self.mode,
            "reason": self.reason,
            "answer": self.answer,
            "by": self.by,
            "approved": self.approved,
            "time": self.time,
        }


def asks_of(records: Iterable[Mapping[str, Any]], session: str) -> list[Asked]:
    """The session's calls in brokerd's log, in order, each with its decision and answer."""
    requests: dict[str, Mapping[str, Any]] = {}
    decisions: dict[str, Mapping[str, Any]] = {}
    answers: dict[str, Mapping[str, Any]] = {}
    order: list[str] = []
    for r in records:
        kind, rid = r.get("type"), r.get("id")
        if not isinstance(rid, str):
            continue
        if kind == "request" and r.get("session") == session:
            requests[rid] = r
            order.append(rid)
        elif kind == "decision" and rid in requests:
            decisions[rid] = r
        elif kind == "approval" and rid in requests:
            answers[rid] = r
    out = []
    for rid in order:
        req, dec, ans = requests[rid], decisions.get(rid, {}), answers.get(rid)
        mode = str(dec.get("mode", "?"))
        answer = None if ans is None else str(ans.get("answer"))
        approved = mode == "allow" or (ans is not None and ans.get("mode") == "allow")
        out.append(
            Asked(
                rid,
                int(req.get("epoch", 0)),
                str(req.get("tool")),
                str(req.get("arguments")),
                str(req.get("time")),
                mode,
                str(dec.get("reason", "")),
                answer,
                approved,
            )
        )
    return out


def _value(text: str) -> object:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _brokerd_call(call: ToolCall) -> tuple[str, object]:
    """The tool and arguments brokerd was sent for `call` (call_tool names the tool)."""
    if call.name == "call_tool":
        inner = _value(call.arguments)
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            args = inner.get("arguments", {})
            return inner["name"], _value(args) if isinstance(args, str) else args
    return call.name, _value(call.arguments)


class Matcher:
    """Pairs the session's calls, in order, with brokerd's requests (the first unpaired one of
    the same epoch, tool and arguments)."""

    def __init__(self, asks: Sequence[Asked]) -> None:
        self._left = list(asks)

    def take(self, epoch: int, call: ToolCall) -> Asked | None:
        tool, args = _brokerd_call(call)
        for i, a in enumerate(self._left):
            if a.epoch == epoch and a.tool == tool and _value(a.arguments) == args:
                return self._left.pop(i)
        return None


def describe(asked: Asked) -> str:
    """One line for a person: who decided what, and whether the call ran."""
    outcome = "approved" if asked.approved else "denied"
    if asked.by == "grants":
        return f"{outcome} by the grants: {asked.reason}" if asked.reason else outcome
    why = f" ({asked.reason})" if asked.reason else ""
    if asked.by == "owner":
        return f"asked{why}; the owner answered {asked.answer}: {outcome}"
    if asked.by == "timeout":
        return f"asked{why}; no answer before brokerd's approval wait ended: {outcome}"
    if asked.by == "closed":
        return f"asked{why}; the owner's chat closed without an answer: {outcome}"
    return f"asked{why}; {asked.answer}: {outcome}"


def broker_log_for(
    arg: Path | None, home_arg: Path | None, environ: Mapping[str, str]
) -> Path | None:
    """--broker-log, else $BOXMAKER_BROKER_LOG, else make run's brokerd's `[broker] log` when
    the home is make run's (no --home or $BOXMAKER_HOME); None when none is known."""
    if arg is not None:
        return arg
    if environ.get(BROKER_LOG_ENV):
        return Path(environ[BROKER_LOG_ENV])
    if home_arg is not None or environ.get("BOXMAKER_HOME"):
        return None
    run = Path(environ[RUN_ENV]) if environ.get(RUN_ENV) else checkout_run_folder()
    config = read_run_env(run / RUN_ENV_NAME).get(BROKERD_CONFIG_ENV)
    if not config:
        return None
    try:  # by the home-file rules: a FIFO there never hangs bxctl
        data = read_regular(Path(config), CONFIG_MAX_BYTES, follow=True)
        log = tomllib.loads((data or b"").decode()).get("broker", {}).get("log")
    except (OSError, SessionError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(log, str) or not log:
        return None
    return Path(config).parent / log  # brokerd's relative paths are its config's folder's


CONFIG_MAX_BYTES = 1 << 20  # brokerd's TOML config


def read_asks(path: Path, session: str) -> list[Asked]:
    """The session's calls in the decision log at `path` (its rotated files too), its chain
    checked.

    Raises:
        OSError: the log cannot be read.
        ChainError: a line breaks the chain (the message names it).
    """
    if not archives(str(path)):
        os.lstat(path)  # a missing log is an error here, not an empty one (never opened: a FIFO)
    _, records = verify_files(str(path))  # by the home-file rules, files named in errors
    return asks_of(records, session)


__all__ = ["Asked", "ChainError", "Matcher", "asks_of", "broker_log_for", "describe", "read_asks"]
