"""Who may talk to the agent (M4 section 4), exactly. [core]

A post starts a turn only if all hold: its `user_id` is in `allowed_users`; it is not the bot's
own; its `type` is empty (system messages have one); none of `props.from_webhook`, `from_bot`,
`from_plugin`, `from_oauth_app` is set (any truthy spelling: `"true"`, `true`, `"1"`...: an
incoming webhook posts with its creator's user id, so `user_id` alone proves nothing); and it is
in a direct message channel with the bot, or in a listed channel and mentions the bot.
Everything else is refused with a reason, which the shell logs as one line without the text.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from boxmaker.gatewayd.mattermost.types import Post

FOREIGN_PROPS = ("from_webhook", "from_bot", "from_plugin", "from_oauth_app")
DIRECT = "D"


@dataclass(frozen=True, slots=True)
class Rules:
    bot_id: str
    bot_username: str
    allowed_users: frozenset[str]
    channels: frozenset[str]


def truthy(value: Any) -> bool:
    """Whether a prop says yes in any spelling a server or a plugin writes: a JSON true, a
    non-zero number, a string other than "", "false", "0", "no", "off" (any case, spaces)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false", "0", "no", "off", "null", "none")
    if value is None:
        return False
    return bool(value)


def mentions_bot(post: Post, mentions: Collection[str], rules: Rules) -> bool:
    """The event's mention list names the bot, or the text has `@<bot username>` as a word (a
    post read over REST in a catch-up carries no mention list)."""
    if rules.bot_id in mentions:
        return True
    name = re.escape(rules.bot_username)
    return bool(name) and re.search(rf"(?<![\w.-])@{name}(?![\w-])", post.message, re.I) is not None


def refused(post: Post, channel_type: str, mentions: Collection[str], rules: Rules) -> str | None:
    """Why the post may not start a turn, or None when it may."""
    if post.user_id == rules.bot_id:
        return "the bot's own post"
    if post.user_id not in rules.allowed_users:
        return f"user {post.user_id} is not in allowed_users"
    if post.type:
        return f"a system message (type {post.type!r})"
    props: Mapping[str, Any] = post.props
    for key in FOREIGN_PROPS:
        if truthy(props.get(key)):
            return f"props.{key} is set (posted by a webhook, bot, plugin or app)"
    if channel_type == DIRECT:
        return None
    if post.channel_id not in rules.channels:
        return f"channel {post.channel_id} (type {channel_type!r}) is neither a DM nor listed"
    if not mentions_bot(post, mentions, rules):
        return f"a listed channel's post that does not mention @{rules.bot_username}"
    return None
