"""One tool call through brokerd: decide, log, hold for the owner if asked, run, log the result.

Every step is appended to the decision log before brokerd acts on it. Errors are data: whatever
goes wrong, the caller gets a ToolResponse whose content says what, and the turn goes on.

Taint: the session's taint is read from the Ledger (fed by the log) under the log's lock, and the
request is appended under the same lock, so the taint a decision saw is the one the records
before its line give: what `replay` recomputes. The result's line carries `untrusted` (and the
host a fetch reached) before the result leaves, so a taint is on disk before its content is.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from boxmaker.brokerd.approvals import Approvals, Held
from boxmaker.brokerd.config import BrokerConfig
from boxmaker.brokerd.grants import (
    Mode,
    Rule,
    allowed_addresses,
    always_rule,
    listed,
    parse_grants,
    redirect_refusal,
)
from boxmaker.brokerd.log import DecisionLog, LogError, now
from boxmaker.brokerd.paths import PathRefused, Workspace, read_grants
from boxmaker.brokerd.policy import APPROVING, Decided, Ledger, decide, request_fields, rule_json
from boxmaker.brokerd.sandbox import Sandbox, SandboxLimits
from boxmaker.brokerd.tools import fetch, shell
from boxmaker.brokerd.tools.files import FileTools, error, response
from boxmaker.brokerd.tools.note import append_note, note_summary
from boxmaker.brokerd.tools.spec import CLOCK, SCHEMAS
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

Notify = Callable[[Held], None]
Cancelled = Callable[[], bool]


def _never() -> bool:
    return False


class Broker:
    def __init__(self, config: BrokerConfig, *, use_openat2: bool | None = None) -> None:
        self.config = config
        self.grants_text = read_grants(config.grants)  # no final link, regular, bounded
        self.rules: tuple[Rule, ...] = parse_grants(self.grants_text)
        if use_openat2 is None and os.environ.get("BOXMAKER_BROKERD_NO_OPENAT2"):
            use_openat2 = False  # the tests run the escape table on the fallback walk too
        self.ws = Workspace(config.workspace, use_openat2=use_openat2)
        self.files = FileTools(
            self.ws, config.result_cap_bytes, config.max_file_bytes, config.max_write_bytes
        )
        self.sandbox = Sandbox(config.workspace, SandboxLimits(**config.shell))
        self.fetch_limits = fetch.FetchLimits(**config.fetch)
        self.ledger = Ledger()
        self.log = DecisionLog(config.log, self.ledger, config.log_rotate_bytes)
        self.log.append("start", grants=self.grants_text.decode(), workspace=config.workspace)
        self.approvals = Approvals()
        self._grants_lock = threading.Lock()

    def close(self) -> None:
        self.log.close()
        self.ws.close()

    def tools(self) -> list[ToolSchema]:
        """clock, and the tools granted something other than deny somewhere (find_tool lists
        only these)."""
        return [s for name, s in SCHEMAS.items() if name == CLOCK or listed(self.rules, name)]

    def call(
        self,
        tool: str,
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
            return self._call(tool, arguments, notify, session, epoch, cancelled)
        except LogError as exc:
            return error(f"refused: brokerd's decision log: {exc}")

    def _call(
        self,
        tool: str,
        arguments: str,
        notify: Notify,
        session: str,
        epoch: int,
        cancelled: Cancelled,
    ) -> ToolResponse:
        call_id = secrets.token_hex(8)
        with self.log.lock:
            taint = self.ledger.taint(session, epoch)
            decided = decide(self.rules, tool, arguments, self.config.workspace, taint)
            fields = request_fields(call_id, tool, arguments, decided, session, epoch)
            self.log.append("request", **fields)
        d = decided.decision
        self.log.append("decision", id=call_id, mode=str(d.mode), reason=d.reason)
        if d.mode is Mode.DENY:
            return error(f"denied: {d.reason}")
        args, target = decided.args, decided.target
        assert args is not None  # a decision other than deny has both
        assert target is not None
        if d.mode is Mode.ASK:
            answer = self._ask(call_id, tool, decided, notify)
            if answer not in APPROVING:
                why = f"; it asked because {decided.tainted}" if decided.tainted else ""
                return error(f"denied: the owner did not approve ({answer}){why}")
        if cancelled():
            return error("cancelled: loopd gave up on the call before it ran; nothing was done")
        return self._run(call_id, tool, args, target, ResultClass(d.class_), cancelled)

    def _summary(self, tool: str, target: tuple[str, ...] | str, args: dict[str, Any]) -> str:
        if tool == "note":
            return note_summary(args)
        if tool == "shell":
            return shell.summary(args)
        if tool == "fetch":
            return fetch.summary(args)
        assert isinstance(target, tuple)
        return self.files.summary(tool, target, args)

    def _ask(self, call_id: str, tool: str, decided: Decided, notify: Notify) -> str:
        args, target, call_hash = decided.args, decided.target, decided.hash
        assert args is not None
        assert target is not None
        try:
            summary = self._summary(tool, target, args)
        except (PathRefused, OSError) as exc:
            summary = f"{tool} (cannot say what it would do: {exc})"
        if decided.tainted:  # the owner sees why a call its grant allows is asked about
            summary += f"\n{decided.tainted}"
        rule = always_rule(tool, target)
        what = "command" if tool == "shell" else "file"
        shown = rule.to_toml() if rule else f"(nothing: this {what} is asked about every time)"
        held = self.approvals.hold(call_id, tool, summary, call_hash, shown)
        with contextlib.suppress(OSError):
            notify(held)
        answer = self.approvals.wait(held, self.config.approval_timeout_ms / 1000)
        approved = answer in APPROVING
        self.log.append(
            "approval",
            id=call_id,
            hash=call_hash,
            answer=answer,
            mode="allow" if approved else "deny",
        )
        if answer == "always" and rule is not None:
            self._add_grant(rule)
        return answer

    def _add_grant(self, rule: Rule) -> None:
        with self._grants_lock, self.log.lock:  # no decision between the line and the rules
            self.log.append("grant", rule=rule_json(rule))
            self.rules = (*self.rules, rule)
            text = self.grants_text + b"\n# added by brokerd: the owner answered always\n"
            text += rule.to_toml().encode()
            tmp = f"{self.config.grants}.{secrets.token_hex(4)}.tmp"
            mode = os.stat(self.config.grants).st_mode & 0o777  # the owner's, kept
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.config.grants)
            self.grants_text = text

    def _run(
        self,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        target: tuple[str, ...] | str,
        class_: ResultClass,
        cancelled: Cancelled = _never,
    ) -> ToolResponse:
        host = None
        try:
            if tool == CLOCK:
                resp = ToolResponse(now(), ResultClass.PUBLIC, untrusted=False, truncated=False)
            elif tool == "note":
                size = len(args["text"].encode("utf-8", "surrogatepass"))
                if size > self.config.max_write_bytes:
                    raise PathRefused(f"the note is {size} bytes, over [broker] max_write_bytes")
                resp = append_note(self.config.home, args)
            elif tool == "shell":
                resp = self._capped(shell.call(self.sandbox, args, class_, cancelled))
            elif tool == "fetch":
                allow = allowed_addresses(self.rules)
                hop_ok = partial(redirect_refusal, self.rules, target)
                resp, got = fetch.call(args, self.fetch_limits, allow, class_, hop_ok)
                resp = self._capped(resp)
                host = got.hosts[0] if got is not None and got.hosts else None
            else:
                resp = getattr(self.files, tool)(target, args)
        except PathRefused as exc:
            resp = error(str(exc))
        except OSError as exc:
            resp = error(f"{tool}: {exc.strerror or exc}")
        except Exception as exc:  # a bug here must not end the turn: errors are data
            resp = error(f"{tool}: brokerd failed: {type(exc).__name__}: {exc}")
        self.log.append(
            "result",
            id=call_id,
            error=resp.content.startswith("error: "),
            truncated=resp.truncated,
            chars=len(resp.content),
            untrusted=resp.untrusted,
            host=host,
            **{"class": str(resp.class_)},
        )
        return resp

    def _capped(self, resp: ToolResponse) -> ToolResponse:
        """The loop's cap ([broker] result_cap_bytes) over a shell's or a fetch's own caps."""
        cut = response(resp.content, self.config.result_cap_bytes, untrusted=resp.untrusted)
        truncated = resp.truncated or cut.truncated
        return ToolResponse(cut.content, resp.class_, untrusted=resp.untrusted, truncated=truncated)
