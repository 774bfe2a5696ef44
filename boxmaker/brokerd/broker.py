"""One tool call through brokerd: decide, log, hold for the owner if asked, run, log the result.

Every step is appended to the decision log before brokerd acts on it. Errors are data: whatever
goes wrong, the caller gets a ToolResponse whose content says what, and the turn goes on.
Everything brokerd knows of a tool is its row in the table of tools (tools/table.py): this
module never looks at a tool's name.

Taint: the session's taint is read from the Ledger (fed by the log) under the log's lock, and the
request is appended under the same lock, so the taint a decision saw is the one the records
before its line give: what `replay` recomputes. The result's line carries `untrusted` (and the
host a call reached) before the result leaves, so a taint is on disk before its content is.
A row that says `untrusted` makes every answer of its tool untrusted, errors included.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Callable
from typing import TypeVar

import orjson

from boxmaker.brokerd import amend
from boxmaker.brokerd.approvals import Approvals, Held
from boxmaker.brokerd.config import BrokerConfig
from boxmaker.brokerd.grants import Mode, Rule, parse_grants
from boxmaker.brokerd.ledger import Ledger
from boxmaker.brokerd.log import DecisionLog, LogError
from boxmaker.brokerd.paths import PathRefused, Workspace, read_grants
from boxmaker.brokerd.policy import (
    APPROVING,
    Decided,
    Decision,
    call_hash,
    decide,
    listed,
    request_record,
    verdict,
)
from boxmaker.brokerd.tools.files import error, response
from boxmaker.brokerd.tools.kind import Args, Setup, Target, Tool, brief_of, visible
from boxmaker.brokerd.tools.table import TABLE, Table, deciding
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema
from boxmaker.proto import decision as record  # the decision log's lines
from boxmaker.proto.broker import HeldCall
from boxmaker.proto.frame import MAX_FRAME_BYTES

# The owner's prompt goes in one owner.sock frame; a call it cannot show whole is not asked.
MAX_PROMPT_BYTES = MAX_FRAME_BYTES - 4096

T = TypeVar("T")
Notify = Callable[[Held, str], None]  # the held call, and the brief line loopd may see
Cancelled = Callable[[], bool]  # true once loopd gave up on the call


def _never() -> bool:
    return False


def undecided(name: str, arguments: str, exc: Exception) -> Decided:
    """The decision on a call whose decision raised: a deny, logged like any bad request."""
    why = f"bad request: brokerd could not decide this call ({type(exc).__name__}); it is refused"
    unparsed = call_hash(name, {"unparsed": arguments})
    return Decided(Decision(Mode.DENY, why), None, None, None, unparsed)


def _state_of(tool: Tool, config: BrokerConfig, ws: Workspace) -> object:
    """The tool's state: its row's factory's, else its section as read, else None."""
    section = config.section(tool.name, tool.section) if tool.section is not None else None
    return tool.state(Setup(config, ws, section)) if tool.state is not None else section


class CallContext:
    """What one call's `run`, `summary` and `unavailable` get (tools/kind.Context): the
    workspace, the grants in force, the tool's state and the call's parsed arguments, and
    `reached`, the host the call reached (set by the tool)."""

    def __init__(
        self,
        broker: Broker,
        tool: Tool,
        value: object = None,
        cancelled: Cancelled = _never,
        epoch: int = 0,
        session: str = "",
    ) -> None:
        self._broker, self._tool, self._value = broker, tool, value
        self.cancelled = cancelled
        self.epoch = epoch
        self.session = session
        self.config = broker.config
        self.rules = broker.rules
        self.ws = broker.ws
        self.reached: str | None = None

    def arguments(self, cls: type[T]) -> T:
        value = self._value
        assert isinstance(value, cls), f"{self._tool.name}'s arguments are not a {cls.__name__}"
        return value

    def state(self, cls: type[T]) -> T:
        return self._broker.state(self._tool.name, cls)

    def verdict(self, name: str, target: Target) -> Decision:
        tool = self._broker.table.get(name)
        assert tool is not None
        return verdict(self.rules, tool, target)

    def capped(self, resp: ToolResponse) -> ToolResponse:
        """The loop's cap ([broker] result_cap_bytes) over a tool's own caps."""
        cut = response(resp.content, self.config.result_cap_bytes, untrusted=resp.untrusted)
        truncated = resp.truncated or cut.truncated
        return ToolResponse(cut.content, resp.class_, untrusted=resp.untrusted, truncated=truncated)


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        use_openat2: bool | None = None,
        table: Table = TABLE,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.table = table
        self.warn = warn or (lambda _line: None)  # brokerd's own log (stderr)
        self.grants_text = read_grants(config.grants)  # no final link, regular, bounded
        self.rules: tuple[Rule, ...] = parse_grants(self.grants_text, table)
        for left in amend.clean_leftovers(config.grants):  # a merge killed half way
            self.warn(f'removed {left}, left by an "always" merge that was cut short')
        if use_openat2 is None and os.environ.get("BOXMAKER_BROKERD_NO_OPENAT2"):
            use_openat2 = False  # the tests run the escape table on the fallback walk too
        self.ws = Workspace(config.workspace, use_openat2=use_openat2)
        # Each own tool's state, made once by its row (a family's rows keep none).
        self._states = {t.name: _state_of(t, config, self.ws) for t in table.own()}
        self.ledger = Ledger()
        self.log = DecisionLog(config.log, self.ledger, config.log_rotate_bytes)
        self.log.append(
            record.Start, grants=self.grants_text.decode(), workspace=config.workspace, rows=True
        )
        self.approvals = Approvals()
        self._grants_lock = threading.Lock()
        self.grants_file = amend.GrantsFile(config.grants, table)

    def close(self) -> None:
        self.log.close()
        self.ws.close()

    def state(self, name: str, cls: type[T]) -> T:
        """The state of the tool `name`, as its row's factory made it."""
        state = self._states.get(name)
        assert isinstance(state, cls), f"{name}'s state is not a {cls.__name__}"
        return state

    def tools(self) -> list[ToolSchema]:
        """The tools granted something other than deny somewhere, and those that need no grant
        (find_tool lists only these)."""
        with contextlib.suppress(Exception):  # every server started at once, each bounded
            self.table.prepare()
        return [t.schema for t in self.table.tools() if listed(self.rules, t)]

    def own_tools(self) -> list[ToolSchema]:
        """`tools`, brokerd's own only: what `list` answers when a family's listing fails."""
        return [t.schema for t in self.table.own() if listed(self.rules, t)]

    def call(
        self,
        name: str,
        arguments: str,
        notify: Notify,
        session: str = "",
        epoch: int = 0,
        cancelled: Cancelled = _never,
    ) -> ToolResponse:
        """One call of `session` (loopd names it; the taint is brokerd's own, from its log).
        A line of it that cannot be logged refuses the call (log.py: nothing runs unlogged, and
        no result leaves before its line). `cancelled` true (loopd gave up on the call) keeps a
        tool from starting and stops a running command (serve.py)."""
        try:
            return self._call(name, arguments, notify, session, epoch, cancelled)
        except LogError as exc:
            return error(f"refused: brokerd's decision log: {exc}")

    def _call(
        self,
        name: str,
        arguments: str,
        notify: Notify,
        session: str,
        epoch: int,
        cancelled: Cancelled,
    ) -> ToolResponse:
        call_id = secrets.token_hex(8)
        # An MCP server is started here, outside the lock, never in a decision; one that
        # cannot start has no rows, and the decision says there is no such tool.
        with contextlib.suppress(Exception):
            self.table.prepare(name)
        with self.log.lock, deciding():
            taint = self.ledger.taint(session, epoch)
            try:
                decided = decide(
                    self.table, self.rules, name, arguments, self.config.workspace, taint
                )
            except Exception as exc:  # a bug, or a library on untrusted input: a refusal
                decided = undecided(name, arguments, exc)
            self.log.append(request_record, call_id, name, arguments, decided, session, epoch)
        d = decided.decision
        self.log.append(record.Decision, id=call_id, mode=str(d.mode), reason=d.reason)
        if d.mode is Mode.DENY:
            return error(f"denied: {d.reason}")
        tool, args, target = decided.tool, decided.args, decided.target
        assert tool is not None  # a decision other than deny has all three
        assert args is not None
        assert target is not None
        ask = d.mode is Mode.ASK
        if ask and tool.unavailable and (off := tool.unavailable(CallContext(self, tool))):
            self.log.append(
                record.Approval,
                id=call_id,
                hash=decided.hash,
                answer=f"not asked: {off}",
                mode="deny",
            )
            return error(f"refused: {tool.name} is off here: {off}; the owner was not asked")
        if d.mode is Mode.ASK:
            answer = self._ask(call_id, decided, notify)
            if answer not in APPROVING:
                why = f"; it asked because {decided.tainted}" if decided.tainted else ""
                return error(f"denied: the owner did not approve ({answer}){why}")
        if cancelled():
            return error("cancelled: loopd gave up on the call before it ran; nothing was done")
        ctx = CallContext(self, tool, decided.value, cancelled, epoch, session)
        return self._run(call_id, ctx, tool, args, target, ResultClass(d.class_))

    def _ask(self, call_id: str, decided: Decided, notify: Notify) -> str:
        tool, args, target = decided.tool, decided.args, decided.target
        assert tool is not None
        assert args is not None
        assert target is not None
        try:
            summary = tool.summary(CallContext(self, tool, decided.value), target, args)
        except (PathRefused, OSError) as exc:
            summary = f"{tool.name} (cannot say what it would do: {exc})"
        summary = visible(summary)  # no byte of a file, a command or a URL can move the cursor
        rule = amend.always_rule(self.table, tool, target, args)
        prompt = HeldCall(
            id=call_id,
            tool=tool.name,
            summary=summary,
            reason=decided.tainted or "",
            always=rule.to_toml() if isinstance(rule, Rule) else "",
            no_always=rule if isinstance(rule, str) else "",
            hash=decided.hash,
        )
        if len(orjson.dumps(prompt.to_json())) > MAX_PROMPT_BYTES:
            answer = f"too large to show whole ({len(summary)} characters): it cannot be approved"
            self.log.append(
                record.Approval, id=call_id, hash=decided.hash, answer=answer, mode="deny"
            )
            return answer
        held = self.approvals.hold(prompt, self.config.approval_timeout_ms / 1000)
        with contextlib.suppress(OSError):
            brief = brief_of(tool, target)  # what loopd may see: nothing read from a file
            notify(held, f"{brief}\n{decided.tainted}" if decided.tainted else brief)
        answer = self.approvals.wait(held, self.config.approval_timeout_ms / 1000)
        approved = answer in APPROVING
        chat = {"post_id": held.by[0], "user_id": held.by[1]} if held.by else {}
        self.log.append(
            record.Approval,
            id=call_id,
            hash=decided.hash,
            answer=answer,
            mode="allow" if approved else "deny",
            **chat,
        )
        if answer == "always" and isinstance(rule, Rule):
            self._add_grant(call_id, rule)
        return answer

    def _add_grant(self, call_id: str, rule: Rule) -> None:
        """Merges `rule` into the grants file as it is on disk, then into the rules in force;
        when it cannot, the log says why (`grant_refused`) and the answer was a yes."""
        with self._grants_lock:
            refused = self.grants_file.merge(rule, len(self.rules))
            if refused is not None:
                self.log.append(record.GrantRefused, id=call_id, reason=refused)
                self.warn(f'"always" on call {call_id}: {refused}')
                return
            with self.log.lock:  # no decision between the line and the rules
                self.log.append(record.Grant, rule=rule.to_json())
                self.rules = (*self.rules, rule)

    def _run(
        self,
        call_id: str,
        ctx: CallContext,
        tool: Tool,
        args: Args,
        target: Target,
        class_: ResultClass,
    ) -> ToolResponse:
        try:
            resp = tool.run(ctx, target, args, class_)
        except PathRefused as exc:
            resp = error(str(exc))
        except OSError as exc:
            resp = error(f"{tool.name}: {exc.strerror or exc}")
        except Exception as exc:  # a bug here must not end the turn: errors are data
            resp = error(f"{tool.name}: brokerd failed: {type(exc).__name__}: {exc}")
        if tool.untrusted and not resp.untrusted:  # what it reveals, errors too (issue 27)
            resp = ToolResponse(resp.content, resp.class_, untrusted=True, truncated=resp.truncated)
        try:
            self.log.append(
                record.Result,
                id=call_id,
                error=resp.content.startswith("error: "),
                truncated=resp.truncated,
                chars=len(resp.content),
                untrusted=resp.untrusted,
                host=ctx.reached,
                class_=str(resp.class_),
            )
        except LogError as exc:
            # It ran: saying "refused" would be false. Its output is withheld, since its
            # taint (the result line) is not on disk before it (issue 37 item 10).
            return error(
                f"{tool.name} ran, but its result could not be logged, so its output is "
                f"withheld: brokerd's decision log: {exc}"
            )
        return resp
