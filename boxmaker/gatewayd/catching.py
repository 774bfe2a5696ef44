"""gatewayd's catch-up: what it reads after every start and every lossy reconnect (M4 section 6).

Every known channel (the listed ones, the DM with each allowed user, made at start with
`channels/direct`, and every channel a post was seen in) is paged forward from its cursor with
`after=`; what it finds is taken as if it had just arrived, within catchup_max_age_s and
catchup_max_posts (the rest: one notice). A channel never read before is read from its newest
page: its fresh posts are answered, older ones are its history. The cursors stay held while a
catch-up is due (`Gateway.serve`), so a post taken live meanwhile never moves one past posts the
catch-up has not read yet.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from boxmaker.gatewayd.catchup import Cursor, notice, plan
from boxmaker.gatewayd.config import GatewayConfig, LimitsConfig
from boxmaker.gatewayd.mattermost.client import MattermostClient
from boxmaker.gatewayd.mattermost.types import MattermostError, Post
from boxmaker.gatewayd.who import Rules, refused

PAGE = 200
MAX_PAGES = 20  # one catch-up reads at most this many pages per channel; the rest next time


class Refusal(Exception):
    """gatewayd will not start: one line saying why and what to do."""


class Gateway(Protocol):
    """What a catch-up uses of serve.Gateway."""

    client: MattermostClient
    config: GatewayConfig
    limits: LimitsConfig
    cursors: dict[str, Cursor]
    types: dict[str, str]
    rules: Rules
    taken: set[str]
    dms: dict[str, str]
    bot_id: str
    _stale: dict[str, int]
    _catching_up: asyncio.Lock

    def say(self, line: str) -> None: ...
    def cursor(self, channel: str) -> Cursor: ...
    def take(self, post: Post, channel_type: str, mentions: tuple[str, ...] = ()) -> None: ...
    async def reply_once(self, post: Post, kind: str, text: str) -> bool: ...
    def _moved(self, channel: str, at: str | None) -> None: ...
    def _write_cursor(self, channel: str, at: str) -> None: ...


async def direct_channels(gw: Gateway, *, refuse: bool) -> None:
    """The DM channel with each allowed user, known from the start (the server makes it if
    it is not there yet), so a first-ever DM sent while gatewayd was away is caught up too.
    A user the server refuses is a config error (`refuse`: at start, one line); a server
    that does not answer is retried at the next catch-up."""
    for user in gw.config.mattermost.allowed_users:
        if user == gw.bot_id or user in gw.dms:
            continue
        try:
            channel = await gw.client.direct_channel(gw.bot_id, user)
        except MattermostError as e:
            if refuse and e.status in (400, 403, 404):  # 429 and 5xx: the server, not us
                raise Refusal(
                    f"allowed_users: the server will not open a direct channel with {user} "
                    f"({e}); give the owner's user id (not the username) of an active user"
                ) from None
            gw.say(f"the direct channel with {user}: {e}; tried again at the next catch-up")
            continue
        gw.dms[user] = channel
        gw.types[channel] = "D"
        gw.cursors.setdefault(channel, Cursor(None))


async def catch_up(gw: Gateway, held: list[str]) -> None:
    """Catches up every known channel; `held`: the channels whose cursor the caller held,
    each released once its catch-up took what it found (kept held when it failed, until a
    later catch-up of it succeeds)."""
    async with gw._catching_up:
        await direct_channels(gw, refuse=False)
        for channel in list(gw.cursors):
            holds = 1 if channel in held else 0
            try:
                await _catch_up(gw, channel)
            except MattermostError as e:
                gw.say(f"catch-up of {channel} failed ({e}); the next reconnect retries")
                gw._stale[channel] = gw._stale.get(channel, 0) + holds
                continue
            for _ in range(holds + gw._stale.pop(channel, 0)):
                gw._moved(channel, gw.cursor(channel).release())


async def _catch_up(gw: Gateway, channel: str) -> None:
    cursor = gw.cursor(channel)
    if channel not in gw.types or not gw.types[channel]:
        gw.types[channel] = await gw.client.channel_type(channel)
    kind = gw.types[channel]
    found: list[Post] = []
    first = cursor.at is None  # never read: its newest page, only the fresh posts answered
    after = cursor.at or ""
    if not after:  # from the channel's first post ("": its first post was taken)
        found = await gw.client.latest_posts(channel, per_page=PAGE)
        after = found[-1].id if len(found) == PAGE and not first else ""
    for _ in range(MAX_PAGES if after else 0):
        page = await gw.client.posts_after(channel, after, per_page=PAGE)
        found += page
        if len(page) < PAGE:
            break
        after = page[-1].id
    if first and not found:
        cursor.at = ""  # an empty channel: read from its first post from now on
        gw._write_cursor(channel, "")
    now_ms = int(time.time() * 1000)
    allowed = [p for p in found if refused(p, kind, (), gw.rules) is None]
    history: set[str] = set()
    if first:  # older than catchup_max_age_s before gatewayd ever read it: history, silent
        old = gw.limits.catchup_max_age_s * 1000
        history = {p.id for p in allowed if now_ms - p.create_at > old}
        allowed = [p for p in allowed if p.id not in history]
    gw.say(f"catch-up of {channel}: {len(found)} post(s), {len(allowed)} to answer")
    chosen = plan(
        allowed,
        now_ms,
        gw.limits.catchup_max_posts,
        gw.limits.catchup_max_age_s,
    )
    skipped = {p.id for p in chosen.skipped}
    if chosen.skipped:
        newest = chosen.skipped[-1]
        n = len(chosen.skipped)
        gw.say(f"catch-up of {channel}: {n} post(s) too old or too many, one notice")
        text = notice(n, gw.limits.catchup_max_posts, gw.limits.catchup_max_age_s)
        if not await gw.reply_once(newest, kind, text):
            return  # the cursor stays: the next catch-up tries again
    for p in found:  # in channel order, so the cursor moves in order
        if p.id in skipped or p.id in history:
            gw.taken.add(p.id)
            gw._moved(channel, cursor.skip(p.id, p.create_at))
        else:
            gw.take(p, kind)  # answered, or refused (then passed)
