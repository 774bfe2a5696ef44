"""One tool call through brokerd: decide, log, hold for the owner if asked, run, log the result.

Every step is appended to the decision log before brokerd acts on it. Errors are data: whatever
goes wrong, the caller gets a ToolResponse whose content says what, and the turn goes on.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Callable
from typing import Any

from boxmaker.brokerd.approvals import Approvals, Held
from boxmaker.brokerd.config import BrokerConfig
from boxmaker.brokerd.grants import Mode, Rule, always_rule, parse_grants
from boxmaker.brokerd.log import DecisionLog, now
from boxmaker.brokerd.paths import PathRefused, Workspace
from boxmaker.brokerd.policy import APPROVING, decide, request_fields, rule_json
from boxmaker.brokerd.tools.files import FileTools, error
from boxmaker.brokerd.tools.note import append_note, note_summary
from boxmaker.brokerd.tools.spec import CLOCK, SCHEMAS
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

Notify = Callable[[Held], None]


class Broker:
    def __init__(self, config: BrokerConfig, *, use_openat2: bool | None = None) -> None:
        self.config = config
        with open(config.grants, "rb") as f:
            self.grants_text = f.read()
        self.rules: tuple[Rule, ...] = parse_grants(self.grants_text)
        if use_openat2 is None and os.environ.get("BOXMAKER_BROKERD_NO_OPENAT2"):
            use_openat2 = False  # the tests run the escape table on the fallback walk too
        self.ws = Workspace(config.workspace, use_openat2=use_openat2)
        self.files = FileTools(
            self.ws, config.result_cap_bytes, config.max_file_bytes, config.max_write_bytes
        )
        self.log = DecisionLog(config.log)
        self.log.append("start", grants=self.grants_text.decode(), workspace=config.workspace)
        self.approvals = Approvals()
        self._grants_lock = threading.Lock()

    def close(self) -> None:
        self.log.close()
        self.ws.close()

    def tools(self) -> list[ToolSchema]:
        """clock, and the tools granted something other than deny somewhere (find_tool lists
        only these)."""
        return [
            s
            for name, s in SCHEMAS.items()
            if name == CLOCK or any(r.tool == name and r.mode is not Mode.DENY for r in self.rules)
        ]

    def call(self, tool: str, arguments: str, notify: Notify) -> ToolResponse:
        call_id = secrets.token_hex(8)
        decided = decide(self.rules, tool, arguments, self.config.workspace)
        self.log.append("request", **request_fields(call_id, tool, arguments, decided))
        d = decided.decision
        self.log.append("decision", id=call_id, mode=str(d.mode), reason=d.reason)
        if d.mode is Mode.DENY:
            return error(f"denied: {d.reason}")
        args, target = decided.args, decided.target
        assert args is not None  # a decision other than deny has both
        assert target is not None
        if d.mode is Mode.ASK:
            answer = self._ask(call_id, tool, args, target, decided.hash, notify)
            if answer not in APPROVING:
                return error(f"denied: the owner did not approve ({answer})")
        return self._run(call_id, tool, args, target)

    def _ask(
        self,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        target: tuple[str, ...] | str,
        call_hash: str,
        notify: Notify,
    ) -> str:
        try:
            if isinstance(target, str):
                summary = note_summary(args)
            else:
                summary = self.files.summary(tool, target, args)
        except (PathRefused, OSError) as exc:
            summary = f"{tool} (cannot say what it would do: {exc})"
        rule = always_rule(tool, target)
        shown = "(nothing: this file is asked about every time)" if rule is None else rule.to_toml()
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
        with self._grants_lock:
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
        self, call_id: str, tool: str, args: dict[str, Any], target: tuple[str, ...] | str
    ) -> ToolResponse:
        try:
            if tool == CLOCK:
                resp = ToolResponse(now(), ResultClass.PUBLIC, untrusted=False, truncated=False)
            elif tool == "note":
                size = len(args["text"].encode("utf-8", "surrogatepass"))
                if size > self.config.max_write_bytes:
                    raise PathRefused(f"the note is {size} bytes, over [broker] max_write_bytes")
                resp = append_note(self.config.home, args)
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
        )
        return resp
