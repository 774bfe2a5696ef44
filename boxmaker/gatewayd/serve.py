"""`gatewayd serve`: Mattermost posts in, turns on loop.sock, answers out, each exactly once.

The shell around the cores (who, sessions, queues, split, replies, catchup, messages):

    MattermostClient.events() -> who may talk -> the session's queue -> a turn on loop.sock
    (client_ref "mm:<post id>", the blocking channel client in a thread; typing every
    typing_interval_ms while it runs) -> the answer's parts posted, each with the reply marker
    and a pending_post_id -> the channel's cursor moved.

Exactly once (M4 section 6; docs/gateway.md has the crash windows): a post is taken again after
any restart or lossy reconnect (catch-up from the cursor) and that is harmless: before its turn,
the thread (or the DM after the post) is read for the bot's posts with its marker, and a post
whose reply is all there is done; a turn sent again is answered by loopd from the session's log
(or `interrupted` when the log shows it cut); only the parts not posted are posted. The token
is never logged: every line goes through `redact`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from dataclasses import dataclass
from typing import TypeVar

from boxmaker.gatewayd import crashpoint
from boxmaker.gatewayd.approvals import Said
from boxmaker.gatewayd.catching import MAX_PAGES, PAGE, Refusal, catch_up, direct_channels
from boxmaker.gatewayd.catchup import Cursor
from boxmaker.gatewayd.config import GatewayConfig
from boxmaker.gatewayd.cursors import read_cursors, write_cursor
from boxmaker.gatewayd.mattermost.client import ClientLimits, MattermostClient
from boxmaker.gatewayd.mattermost.types import Connected, MattermostError, Post, redact
from boxmaker.gatewayd.messages import (
    attachments_note,
    error_post,
    loopd_down,
    queue_full,
    too_long,
)
from boxmaker.gatewayd.queues import FULL, RUN, SessionQueues
from boxmaker.gatewayd.relay import Relay
from boxmaker.gatewayd.replies import PART, REPLY_TO, missing, pending_id, posted_parts
from boxmaker.gatewayd.sessions import Place, client_ref, place_of
from boxmaker.gatewayd.split import split_answer
from boxmaker.gatewayd.turns import Outcome, in_thread, run_turn
from boxmaker.gatewayd.who import Rules, refused
from boxmaker.proto import ApprovalNeededEvent

T = TypeVar("T")

POST_ATTEMPTS = 8  # an answer that cannot be posted is left for the next catch-up


@dataclass(frozen=True, slots=True)
class _Item:
    post: Post
    place: Place
    channel_type: str


class Gateway:
    def __init__(self, config: GatewayConfig, client: MattermostClient, token: str) -> None:
        self.config = config
        self.limits = config.limits
        self.client = client
        self._token = token
        self.queues: SessionQueues[_Item] = SessionQueues(self.limits.queue_per_session)
        self.cursors: dict[str, Cursor] = {}
        self.types: dict[str, str] = {}
        self.taken: set[str] = set()  # post ids taken by this process (a replay is harmless)
        self.tasks: set[asyncio.Task[None]] = set()
        self.rules = Rules("", "", frozenset(), frozenset())
        self.max_chars = 16383
        self.bot_id = ""
        self.orphans: set[str] = set()  # thread roots the server does not have (deleted, unknown)
        self.dms: dict[str, str] = {}  # allowed user -> the bot's DM channel with them
        self._stale: dict[str, int] = {}  # channel -> holds kept by failed catch-ups
        self._catching_up = asyncio.Lock()
        self.folder = config.state.folder / "cursors"
        self.run = secrets.token_hex(4)  # this run's part of every pending_post_id
        self.relay = Relay(config.brokerd.chat_socket, client, self.say)  # approvals

    def say(self, line: str) -> None:
        sys.stderr.write(redact(f"gatewayd: {line}", self._token) + "\n")
        sys.stderr.flush()

    # ---- start ----------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            me = await self.client.me()
        except MattermostError as e:
            raise Refusal(f"cannot reach Mattermost at {self.config.mattermost.url}: {e}") from None
        if not me.is_bot:
            raise Refusal(
                f"the token is @{me.username}'s, which is not a bot account (is_bot false); make "
                "a bot account (System Console > Integrations > Bot Accounts) and use its token"
            )
        self.bot_id = me.id
        m = self.config.mattermost
        self.rules = Rules(me.id, me.username, frozenset(m.allowed_users), frozenset(m.channels))
        self.max_chars = await self.client.max_post_chars()
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for channel, (after, kind) in read_cursors(self.folder, self.say).items():
            self.cursors[channel] = Cursor(after)
            self.types[channel] = kind
        for channel in m.channels:
            self.cursors.setdefault(channel, Cursor(None))
        await direct_channels(self, refuse=True)
        self.say(f"connected as @{me.username} ({me.id}); {len(self.cursors)} channel(s) known")

    async def serve(self) -> None:
        await self.start()
        async for event in self.client.events():
            if isinstance(event, Connected):
                if event.lossless:
                    self.say("socket resumed, nothing lost")
                else:
                    self.say("socket connected; catching up the known channels")
                    self._spawn(catch_up(self, self._hold_all()))
                continue
            kind = await self._kind(event.post.channel_id, event.channel_type)
            if kind:  # else: not judged now (a DM must not be refused as a stranger's channel)
                self.take(event.post, kind, event.mentions)

    def _hold_all(self) -> list[str]:
        """Every known cursor held until its catch-up has taken what it finds: a post taken live
        meanwhile must not move a cursor past older posts the catch-up has not read yet."""
        for cursor in self.cursors.values():
            cursor.hold()
        return list(self.cursors)

    async def _kind(self, channel: str, said: str) -> str:
        """The channel's type: the event's `channel_type`, else the one known, else asked (a
        server that leaves the key out must not make the owner's DM look like a stranger's)."""
        if said:
            self.types.setdefault(channel, said)
            return said
        if not self.types.get(channel):
            try:
                self.types[channel] = await self.client.channel_type(channel)
            except MattermostError as e:
                self.say(f"channel {channel}: its type is unknown ({e}); caught up later")
                return ""
        return self.types[channel]

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ---- taking posts -----------------------------------------------------------------------

    def cursor(self, channel: str) -> Cursor:
        return self.cursors.setdefault(channel, Cursor(None))

    def take(self, post: Post, channel_type: str, mentions: tuple[str, ...] = ()) -> None:
        if post.id in self.taken:
            return
        cursor = self.cursor(post.channel_id)
        why = refused(post, channel_type, mentions, self.rules)
        if why is not None:
            if post.user_id != self.bot_id:  # the bot's own posts are not news
                self.say(f"not taken: post {post.id} in {post.channel_id}: {why}")
            self._moved(post.channel_id, cursor.skip(post.id, post.create_at))
            return
        try:
            place = place_of(post, channel_type)
        except ValueError as e:
            self.say(f"not taken: post {post.id}: {e}")
            self._moved(post.channel_id, cursor.skip(post.id, post.create_at))
            return
        self.taken.add(post.id)
        cursor.take(post.id, post.create_at)
        item = _Item(post, place, channel_type)
        if (said := self.relay.answer_in(post, channel_type)) is not None:
            self._spawn(self._relayed(item, said))  # an approval answer: never queued
            return
        got = self.queues.offer(place.session, item)
        if got == RUN:
            self._spawn(self._session(item))
        elif got == FULL:
            self._spawn(self._notice(item, queue_full(self.limits.queue_per_session)))

    async def _session(self, item: _Item | None) -> None:
        while item is not None:
            session = item.place.session
            try:
                await self.answer(item)
            except Exception as e:  # a bug: said, the next post still runs
                self.say(f"post {item.post.id}: {type(e).__name__}: {e}")
            item = self.queues.done(session)

    async def _relayed(self, item: _Item, said: Said) -> None:
        """The owner's approval answer, relayed to brokerd; what it said, posted once."""
        await self._first_sight(item.post)
        await self._notice(item, await in_thread(self.relay.relay, said, item.post))

    async def reply_once(self, post: Post, kind: str, text: str) -> bool:
        """`text` as the whole reply to `post` (a notice): False when it could not be posted."""
        return await self._post_parts(_Item(post, place_of(post, kind), kind), [text])

    async def _notice(self, item: _Item, text: str) -> None:
        if await self._post_parts(item, [text]):
            self._finish(item.post)

    # ---- one post -------------------------------------------------------------------------

    async def answer(self, item: _Item) -> None:
        post, place = item.post, item.place
        await self._first_sight(post)
        crashpoint.reached("before_turn")
        try:
            if self._complete(await self._replies(item), post.id):
                self._finish(post)  # answered before a restart: nothing to do
                return
        except MattermostError as e:
            self.say(f"post {post.id}: cannot read its thread ({e}); answering it")
        content = post.message
        if len(content) > self.limits.max_inbound_chars:
            await self._notice(item, too_long(len(content), self.limits.max_inbound_chars))
            return
        if post.file_ids:
            content = f"{content}\n\n{attachments_note(len(post.file_ids))}"
        loop = asyncio.get_running_loop()

        def on_approval(event: ApprovalNeededEvent) -> None:
            text = self.relay.notice(event, place.session, item.channel_type)  # blocking
            pending = f"{self.bot_id}:{self.run}:{post.id}:a{event.id}"
            notice = self.relay.post(post.channel_id, self._root(place), text, pending)
            asyncio.run_coroutine_threadsafe(notice, loop)

        typing = asyncio.create_task(self._typing(post.channel_id, self._root(place)))
        try:
            outcome = await in_thread(
                run_turn,
                self.config.loopd.socket,
                place.session,
                content,
                client_ref(post),
                on_approval,
            )
        finally:
            typing.cancel()
        crashpoint.reached("after_turn")
        if await self._post_parts(item, self._texts(outcome, place)):
            crashpoint.reached("after_post")
            self._finish(post)

    def _texts(self, outcome: Outcome, place: Place) -> list[str]:
        if outcome.down is not None:
            self.say(f"session {place.session}: loopd: {outcome.down}")
            return [loopd_down(place.session)]
        if outcome.error is not None:
            return [error_post(outcome.error, place.session)]
        if outcome.answer is None:
            return ["(no answer: the model gave reasoning only, which is not posted)"]
        where = f"`bxctl history {place.session}` on the box"
        return split_answer(outcome.answer, self.max_chars, self.limits.max_reply_posts, where)

    async def _typing(self, channel: str, parent: str) -> None:
        with contextlib.suppress(MattermostError):
            while True:
                await self.client.typing(channel, parent)
                await asyncio.sleep(self.limits.typing_interval_ms / 1000)

    def _root(self, place: Place) -> str:
        """The answer's root_id: the thread's, or the top level when the server has no such root
        (a reply to a deleted or unknown post: answered beside it rather than never)."""
        return "" if place.root_id in self.orphans else place.root_id

    async def _replies(self, item: _Item) -> list[Post]:
        """The posts where the bot's reply to this post would be."""
        root = self._root(item.place)
        if root:
            try:
                return await self.client.thread(root)
            except MattermostError as e:
                if e.status != 404:
                    raise
                self.say(f"post {item.post.id}: its thread's root {root} is gone; answered beside")
                self.orphans.add(root)
        found: list[Post] = []
        after = item.post.id
        for _ in range(MAX_PAGES):
            page = await self.client.posts_after(item.post.channel_id, after, per_page=PAGE)
            found += page
            if len(page) < PAGE:
                break
            after = page[-1].id
        return found

    def _complete(self, posts: list[Post], post_id: str) -> bool:
        got = posted_parts(posts, self.bot_id, post_id)
        totals = {p.props.get(PART) for p in posts if p.props.get(REPLY_TO) == post_id} - {None}
        total = max((_total(t) for t in totals), default=0)
        return bool(got) and not missing(total, got)

    async def _post_parts(self, item: _Item, texts: list[str]) -> bool:
        """Posts the parts the thread does not hold yet; False when Mattermost kept refusing."""
        post, place = item.post, item.place
        for attempt in range(POST_ATTEMPTS):
            try:
                todo = missing(
                    len(texts), posted_parts(await self._replies(item), self.bot_id, post.id)
                )
                for n, i in enumerate(todo):
                    await self.client.create_post(
                        post.channel_id,
                        texts[i - 1],
                        root_id=self._root(place),
                        props={REPLY_TO: post.id, PART: f"{i}/{len(texts)}"},
                        pending_post_id=pending_id(self.bot_id, self.run, post.id, i),
                    )
                    if n < len(todo) - 1:
                        crashpoint.reached("between_parts")
                return True
            except MattermostError as e:
                if e.status == 400 and self._root(place):  # "Invalid RootId": the root went away
                    self.say(f"post {post.id}: its thread's root is gone ({e}); answered beside")
                    self.orphans.add(place.root_id)
                    continue
                wait = min(2**attempt, self.limits.backoff_max_ms / 1000)
                self.say(f"post {post.id}: posting the answer failed ({e}); again in {wait:g} s")
                await asyncio.sleep(wait)
        self.say(f"post {post.id}: not answered now; the next catch-up answers it")
        return False

    # ---- the cursor -----------------------------------------------------------------------

    async def _first_sight(self, post: Post) -> None:
        """A channel seen for the first time gets its cursor file now, just before this post (or
        "" when it is the channel's first), so a crash from here on is caught up after."""
        channel = post.channel_id
        cursor = self.cursor(channel)
        if cursor.at is not None or cursor.held or cursor.open_before(post.id):
            return  # a catch-up reads it (or took older posts): the cursor moves as they finish
        if (self.folder / f"{channel}.json").exists():
            return
        try:
            latest = await self.client.latest_posts(channel, per_page=PAGE)
        except MattermostError as e:
            self.say(f"channel {channel}: cannot read it for its cursor ({e})")
            return
        ids = [p.id for p in latest]
        before = ids[ids.index(post.id) - 1] if post.id in ids[1:] else ""
        cursor.at = before
        self._write_cursor(channel, before)

    def _finish(self, post: Post) -> None:
        self._moved(post.channel_id, self.cursor(post.channel_id).finish(post.id))

    def _moved(self, channel: str, at: str | None) -> None:
        if at is not None:
            self._write_cursor(channel, at)

    def _write_cursor(self, channel: str, at: str) -> None:
        write_cursor(self.folder, channel, at, self.types.get(channel, ""))


def _total(part: object) -> int:
    if not isinstance(part, str):
        return 1
    tail = part.partition("/")[2]
    return int(tail) if tail.isdigit() else 1


async def serve(config: GatewayConfig, token: str) -> None:
    """Runs until cancelled (SIGTERM): see `Gateway`."""
    lim = config.limits
    limits = ClientLimits(
        ping_interval_ms=lim.ping_interval_ms,
        pong_timeout_ms=lim.pong_timeout_ms,
        rest_timeout_ms=lim.rest_timeout_ms,
        backoff_max_ms=lim.backoff_max_ms,
        silence_ms=max(90_000, 3 * lim.ping_interval_ms),
    )
    client = MattermostClient(config.mattermost.url, token, limits)
    gateway = Gateway(config, client, token)
    try:
        await gateway.serve()
    finally:
        for task in list(gateway.tasks):
            task.cancel()
        await client.close()
