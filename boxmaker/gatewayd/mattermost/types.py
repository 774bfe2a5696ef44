"""Mattermost's shapes as gatewayd reads them: posts, the bot's user, socket events [core]

Parsed, never matched as bytes: the wire has spaces after colons, extra keys come and go between
server versions, and `data.post` / `data.mentions` of a `posted` event are JSON *strings* holding
JSON (../shared/mattermost/ws/posted.*). A bad shape raises MattermostError naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class MattermostError(Exception):
    """A failed call or a bad shape. The message never holds the token (the client redacts it)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status; None for transport errors and bad shapes


def redact(text: str, token: str) -> str:
    """`text` with every occurrence of the token replaced (a short token is still a secret)."""
    return text.replace(token, "<token>") if token else text


def _str(d: Mapping[str, Any], key: str, what: str, default: str | None = None) -> str:
    v = d.get(key, default)
    if not isinstance(v, str):
        raise MattermostError(f"{what}: {key!r} is {type(v).__name__}, not a string")
    return v


def _int(d: Mapping[str, Any], key: str, what: str, default: int | None = None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise MattermostError(f"{what}: {key!r} is {type(v).__name__}, not an integer")
    return v


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MattermostError(f"{what} is {type(value).__name__}, not an object")
    return value


def loads_object(text: str | bytes, what: str) -> Mapping[str, Any]:
    """One JSON object from text; anything else is a MattermostError naming `what`."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise MattermostError(f"{what} is not JSON: {e}") from None
    return _object(value, what)


@dataclass(frozen=True, slots=True)
class Post:
    id: str
    channel_id: str
    user_id: str
    root_id: str
    message: str
    type: str  # "" for a user's post; non-empty for system messages
    props: Mapping[str, Any]  # from_webhook / from_bot / from_plugin / from_oauth_app, ...
    create_at: int  # ms
    file_ids: tuple[str, ...]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Post:
        d = _object(d, "post")
        what = f"post {d.get('id')!r}"
        props = d.get("props")
        props = {} if props is None else props
        file_ids = d.get("file_ids")
        file_ids = [] if file_ids is None else file_ids
        if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids):
            raise MattermostError(f"{what}: 'file_ids' is not a list of strings")
        return cls(
            id=_str(d, "id", what),
            channel_id=_str(d, "channel_id", what),
            user_id=_str(d, "user_id", what),
            root_id=_str(d, "root_id", what, ""),
            message=_str(d, "message", what, ""),
            type=_str(d, "type", what, ""),
            props=_object(props, f"{what} props"),
            create_at=_int(d, "create_at", what),
            file_ids=tuple(file_ids),
        )


def post_list(d: Mapping[str, Any]) -> list[Post]:
    """A PostList (`order` + `posts`, posts.yaml) as posts oldest first.

    Only the ids in `order` count (`posts` may hold more, e.g. thread roots for context). The
    server sends `order` newest first; sorting by create_at, then by that order reversed, gives
    oldest first whichever way a server orders it.
    """
    d = _object(d, "post list")
    order = d.get("order") or []
    posts = _object(d.get("posts") or {}, "post list 'posts'")
    if not isinstance(order, list) or not all(isinstance(i, str) for i in order):
        raise MattermostError("post list: 'order' is not a list of ids")
    found = []
    for rank, pid in enumerate(order):
        if pid not in posts:
            raise MattermostError(f"post list: {pid!r} is in 'order' but not in 'posts'")
        found.append((rank, Post.from_json(posts[pid])))
    found.sort(key=lambda rp: (rp[1].create_at, -rp[0]))
    return [p for _, p in found]


@dataclass(frozen=True, slots=True)
class Me:
    id: str
    username: str
    is_bot: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Me:
        d = _object(d, "user")
        is_bot = d.get("is_bot", False)
        if not isinstance(is_bot, bool):
            raise MattermostError("user: 'is_bot' is not a boolean")
        return cls(_str(d, "id", "user"), _str(d, "username", "user", ""), is_bot)


@dataclass(frozen=True, slots=True)
class Posted:
    """A `posted` event: data.post parsed twice (it is a JSON string)."""

    post: Post
    channel_type: str  # data.channel_type: "D" direct, "O"/"P" channels, "G" group
    mentions: tuple[str, ...]  # data.mentions (a JSON string of user ids), () when absent
    seq: int


@dataclass(frozen=True, slots=True)
class Connected:
    """After every hello, after a seq gap, and on a resumed socket's first event.

    lossless is True only when the server resumed our connection with nothing lost (same
    connection_id, no seq gap); False means: catch up over REST. A resume with nothing to replay
    is silent on the wire, so it yields nothing until its first event.
    """

    connection_id: str
    lossless: bool


@dataclass(frozen=True, slots=True)
class Event:
    """One socket event, parsed once: its name, its seq (None when absent), its data."""

    event: str
    seq: int | None
    data: Mapping[str, Any]


def parse_event(text: str | bytes) -> Event | None:
    """A socket frame as an Event; None for what is not an event (a `seq_reply` answer)."""
    d = loads_object(text, "socket frame")
    if "event" not in d:
        return None
    seq = d.get("seq")
    if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
        raise MattermostError(f"socket frame: 'seq' is {type(seq).__name__}, not an integer")
    name = _str(d, "event", "socket frame")
    data = d.get("data") or {}
    if not isinstance(data, Mapping) and name not in ("posted", "hello"):
        data = {}  # an event gatewayd does not read: its data's shape is not ours to judge
    return Event(name, seq, _object(data, "socket frame 'data'"))


def _json_string_or_value(value: Any) -> Any:
    # data.post and data.mentions are JSON strings on every server seen; take a decoded value too
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError as e:
            raise MattermostError(f"posted: a JSON-string field is not JSON: {e}") from None
    return value


def posted_from(event: Event) -> Posted:
    """A `posted` event's post, channel type and mentions."""
    post = Post.from_json(_object(_json_string_or_value(event.data.get("post")), "posted 'post'"))
    mentions: Any = event.data.get("mentions")
    mentions = [] if mentions in (None, "") else _json_string_or_value(mentions)
    if not isinstance(mentions, list) or not all(isinstance(m, str) for m in mentions):
        raise MattermostError("posted: 'mentions' is not a list of user ids")
    channel_type = event.data.get("channel_type", "")
    if not isinstance(channel_type, str):
        raise MattermostError("posted: 'channel_type' is not a string")
    return Posted(post, channel_type, tuple(mentions), event.seq if event.seq is not None else -1)
