"""gatewayd's side of the approvals: the held call's notice, and the owner's answers relayed to
brokerd's chat.sock (docs/gateway.md "Approvals").

Notify (the default, and whenever chat.sock cannot be reached: brokerd's switch is off): the
notice names the tool and loopd's brief line and says to answer on the box. With `[brokerd]
chat_socket` set and brokerd's switch on, the notice is brokerd's whole view of the call with
its code (approvals.question), unless brokerd says the call is box-only. A post of the answer's
shape is relayed only when who.py let it through (the owner's own post, no webhook, bot or
system message), it is in the direct channel with the bot, and it can be meant as an answer: its
code is one a question of this run showed, or brokerd holds a call the chat may answer now.
Otherwise ("no thanks" with nothing held) it is a turn like any post. brokerd checks the rest.
The blocking calls run on the turn's thread (the notice), in a thread of their own (an answer),
or, bounded by HOLDING_TIMEOUT_S, on the event loop (whether anything is held).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from boxmaker._client.chat import chat_answer, chat_calls
from boxmaker.gatewayd.approvals import Said, answer_in, box_only, question, verdict
from boxmaker.gatewayd.mattermost.client import MattermostClient
from boxmaker.gatewayd.mattermost.types import MattermostError, Post
from boxmaker.gatewayd.messages import approval_post
from boxmaker.gatewayd.who import DIRECT
from boxmaker.proto import ApprovalNeededEvent
from boxmaker.proto.broker import ChatAnswer
from boxmaker.proto.errors import BodyError, ProtocolError

HOLDING_TIMEOUT_S = 1.0  # brokerd answers `pending` at once; a hung brokerd must not stall gatewayd
SHOWN_KEPT = 256  # codes of this run's questions, so a late answer is told what became of its call


class Relay:
    def __init__(
        self, socket: Path | None, client: MattermostClient, say: Callable[[str], None]
    ) -> None:
        self.socket = socket
        self.client = client
        self.say = say
        self._shown: OrderedDict[str, None] = OrderedDict()  # codes this run's questions showed
        self._lock = threading.Lock()  # notices come from the turns' threads

    async def post(self, channel: str, root: str, text: str, pending: str) -> None:
        """A notice that is not a reply (no marker), posted once (`pending`: the call's id)."""
        try:
            await self.client.create_post(channel, text, root_id=root, pending_post_id=pending)
        except MattermostError as e:
            self.say(f"the approval notice in {channel} failed: {e}")

    def notice(self, event: ApprovalNeededEvent, session: str, channel_type: str) -> str:
        """The post for a held call (blocking: it may ask brokerd for the call's code)."""
        if self.socket is None:
            return approval_post(event.tool, event.summary, session)
        try:
            calls = chat_calls(self.socket)
        except (OSError, ProtocolError, BodyError) as e:
            self.say(f"approval {event.id}: chat.sock: {e}; the notice says to answer on the box")
            return approval_post(event.tool, event.summary, session)
        call = next((c for c in calls if c.id == event.id), None)
        if call is None:  # answered or withdrawn meanwhile
            return approval_post(event.tool, event.summary, session)
        if not call.code:
            return box_only(event.tool, event.summary, call.box_only, session)
        with self._lock:
            self._shown[call.code] = None
            while len(self._shown) > SHOWN_KEPT:
                self._shown.popitem(last=False)
        dm = channel_type == DIRECT
        return question(call.tool, call.summary, call.code, call.wait_ms, session, dm)

    def answer_in(self, post: Post, channel_type: str) -> Said | None:
        """The answer a post gives, when it is one to relay (the post already passed who.py)."""
        if self.socket is None or channel_type != DIRECT:
            return None
        said = answer_in(post.message)
        if said is None:
            return None
        with self._lock:
            if said.code in self._shown:
                return said
        try:
            holding = any(c.code for c in chat_calls(self.socket, HOLDING_TIMEOUT_S))
        except (OSError, ProtocolError, BodyError):
            holding = False  # brokerd's switch off (no socket), or brokerd down: not an answer
        return said if holding else None

    def relay(self, said: Said, post: Post) -> str:
        """Relays the owner's answer (blocking); the reply to post."""
        assert self.socket is not None
        answer = ChatAnswer(said.code, said.answer, post.id, post.user_id)
        try:
            refused = chat_answer(self.socket, answer)
        except (OSError, ProtocolError) as e:
            refused = f"brokerd's chat socket cannot be reached ({e}): chat approvals are off"
        self.say(f"post {post.id}: approval answer {said.answer!r} for {said.code!r}: "
                 + ("taken" if refused is None else f"not taken: {refused}"))  # fmt: skip
        return verdict(said, refused)
