"""chat.sock: the owner's yes or no from Mattermost, relayed by gatewayd (M4 section 8).

Only when brokerd's own config turns it on (`[broker.chat_approvals]`, config.ChatApprovals):
serve.py binds the socket 0600 for gatewayd's uid and admits that uid alone (SO_PEERCRED; never
loopd's: the config refuses the same uid). gatewayd lists the held calls (`pending`: each with
its code when the chat may answer it, else why it is box-only) and relays an answer (`answer
{code, answer, post_id, user_id}`). brokerd takes it only when all hold:

- the answer is `yes` or `no` (never `always`: a rule is added on the box only);
- the code is the one `code_of` derives from a call that is held now (from the call's random id
  and its hash: a stale answer, or one meant for another call, names no held call);
- the call's tool is on the owner's list, is not box-only (`shell`, `note`: config.BOX_ONLY_TOOLS)
  and the call was not asked because its session is tainted;
- brokerd is still waiting (approvals.py: a late answer is not taken).

Anything else is refused and changes nothing (the call still waits for a right answer, from
the chat or the box). Every answer, taken or refused, is a line in brokerd's log with the post
and user ids; a taken one is the call's `approval` record in the decision log with both ids.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import re
import socket
from collections import OrderedDict
from collections.abc import Callable

from boxmaker._daemon import SetupError
from boxmaker._daemon.log import DaemonLog
from boxmaker.brokerd.approvals import Approvals, Held
from boxmaker.brokerd.config import BOX_ONLY_TOOLS, ChatApprovals
from boxmaker.brokerd.conn import Conn
from boxmaker.proto.broker import CHAT_ANSWERS, CHAT_KINDS, ChatAnswer, ChatCall
from boxmaker.proto.errors import BodyError, FrameError

CODE_CHARS = "abcdefghijkmnpqrstuvwxyz23456789"  # 32, no l/o/0/1: typed on a phone
CODE_LEN = 6  # 30 bits; only the owner's posts are relayed, within the approval timeout
CODES_KEPT = 256  # codes of calls listed before, so a late answer is told what became of its call
_ID = re.compile(r"[A-Za-z0-9]{1,64}")  # a Mattermost id (26 characters) as logged
CHAT_SETTING = "[broker.chat_approvals] socket"
Route = tuple[int, Callable[[socket.socket], None], str]  # serve.py's: uid, handler, name


def check_uids(chat: ChatApprovals | None, loopd_uid: int) -> None:
    """SetupError when the chat socket would admit loopd's uid (loopd_uid left to default)."""
    if chat is not None and chat.gatewayd_uid == loopd_uid:
        raise SetupError(
            f"[broker.chat_approvals] gatewayd_uid: {loopd_uid} is loopd's uid; the chat socket "
            "must never admit loopd, so run gatewayd as a user of its own (docs/operations.md)"
        )


def banner(chat: ChatApprovals | None) -> str:
    """The start line's word on the switch."""
    if chat is None:
        return "chat approvals off"
    tools = ", ".join(chat.tools)
    return f"chat approvals on: {chat.socket} for gatewayd uid {chat.gatewayd_uid}, tools {tools}"


def code_of(call_id: str, call_hash: str) -> str:
    """The short code the chat's question shows and an answer quotes: from the call's random id
    and its hash (tool + canonical arguments), so two calls never share one."""
    digest = hashlib.sha256(f"boxmaker chat approval\0{call_id}\0{call_hash}".encode()).digest()
    n = int.from_bytes(digest[:8], "big")
    return "".join(CODE_CHARS[(n >> (5 * i)) & 31] for i in range(CODE_LEN))


def box_only(held: Held, chat: ChatApprovals) -> str:
    """Why the chat may not answer this call ("" when it may)."""
    tool = held.call.tool
    if tool in BOX_ONLY_TOOLS:
        return f"{tool} is answered on the box only ({BOX_ONLY_TOOLS[tool]})"
    if held.call.reason:
        return f"it was asked because {held.call.reason}; such calls are answered on the box only"
    if tool not in chat.tools:
        return f"{tool} is not in [broker.chat_approvals] tools"
    return ""


class ChatDesk:
    """The chat socket's side of the approvals; one per brokerd, shared by its connections."""

    def __init__(self, approvals: Approvals, chat: ChatApprovals, log: DaemonLog) -> None:
        self.approvals = approvals
        self.chat = chat
        self.log = log
        self._codes: OrderedDict[str, str] = OrderedDict()  # code -> call id, of calls listed

    def route(self) -> Route:
        """serve.py's route: the one uid admitted, the handler, the socket's name in its log."""
        return self.chat.gatewayd_uid, self.serve, "chat.sock"

    def calls(self) -> list[dict[str, object]]:
        out = []
        for held in self.approvals.pending():
            why = box_only(held, self.chat)
            code = "" if why else code_of(held.id, held.hash)
            if code:
                self._codes[code] = held.id
                while len(self._codes) > CODES_KEPT:
                    self._codes.popitem(last=False)
            view = held.view()
            out.append(
                ChatCall(
                    id=held.id,
                    tool=held.call.tool,
                    summary="" if why else held.call.summary,
                    code=code,
                    box_only=why,
                    wait_ms=view.get("wait_ms"),
                ).to_json()
            )
        return out

    def answer(self, a: ChatAnswer) -> tuple[str, str | None]:
        """(the call's id or "", why it was refused or None when taken); logged either way."""
        call_id, why = self._answer(a)
        said = "taken" if why is None else f"refused: {why}"
        self.log.say(
            f"chat answer {a.answer[:16]!r} code {a.code[:16]!r} from post {a.post_id} "
            f"user {a.user_id}" + (f" on call {call_id}" if call_id else "") + f": {said}"
        )
        return call_id, why

    def _answer(self, a: ChatAnswer) -> tuple[str, str | None]:
        if a.answer == "always":
            return "", (
                '"always" is answered on the box only (bxctl approve); from the chat, answer '
                "yes or no"
            )
        if a.answer not in CHAT_ANSWERS:
            return "", "answer yes or no"
        held = next(
            (
                h
                for h in self.approvals.pending()
                if hmac.compare_digest(code_of(h.id, h.hash).encode(), a.code.encode())
            ),
            None,
        )
        if held is None:
            known = self._codes.get(a.code)
            if known is not None:
                return known, self.approvals.not_held(known)
            return "", f"no held call has the code {a.code!r} (mistyped, or its call ended)"
        if why := box_only(held, self.chat):
            return held.id, why
        refused = self.approvals.answer(held.id, held.hash, a.answer, by=(a.post_id, a.user_id))
        return held.id, refused

    def serve(self, sock: socket.socket) -> None:
        conn = Conn(sock, CHAT_KINDS)
        with sock:
            try:
                while (frame := conn.recv()) is not None:
                    if frame.kind == "pending":
                        conn.send("pending", {"calls": self.calls()}, True)
                        continue
                    a = _chat_answer(frame.body) if frame.kind == "answer" else None
                    if a is None:
                        conn.error(
                            "chat.sock takes pending, or answer {code, answer, post_id, user_id} "
                            "with Mattermost ids"
                        )
                        continue
                    call_id, why = self.answer(a)
                    if why is not None:
                        conn.error(why)
                    else:
                        conn.send("answered", {"id": call_id, "answer": a.answer}, True)
            except (FrameError, OSError) as exc:
                with contextlib.suppress(OSError):
                    conn.error(str(exc))


def _chat_answer(body: dict[str, object]) -> ChatAnswer | None:
    try:
        a = ChatAnswer.from_json(body)
    except BodyError:
        return None
    if not (_ID.fullmatch(a.post_id) and _ID.fullmatch(a.user_id)):
        return None
    return ChatAnswer(a.code.strip().lower(), a.answer.strip().lower(), a.post_id, a.user_id)
