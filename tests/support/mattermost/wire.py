"""How the fake Mattermost server writes what it sends: ids, posts, socket events.

As the real server writes them (../shared/mattermost/): Go's encoding/json (compact, `<`, `>` and
`&` escaped as \\u003c...), a socket event as `precomputedJSONBuf` frames it (a space after each
top-level colon, ws/posted.dm.wire.captured.txt), `data.post` and `data.mentions` as JSON strings.
"""

from __future__ import annotations

import itertools
import json
import secrets
import string
from typing import Any

_ALPHABET = string.ascii_lowercase + string.digits
_counter = itertools.count()


def new_id() -> str:
    """A 26-character id in Mattermost's alphabet (model.NewId's length and letters)."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(22)) + f"{next(_counter) % 10000:04d}"


def go_json(value: Any) -> str:
    """`value` as Go's json.Marshal writes it: compact, HTML characters escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(ch, esc)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


STYLES = ("server", "pretty")


def event_frame(
    event: str, data: dict[str, Any], broadcast: dict[str, Any], seq: int, style: str = "server"
) -> str:
    """One socket event on the wire: compact parts, a space after each top-level colon.

    style "pretty" is another spelling of the same event (sorted keys, indented, as the 2023
    captures were printed) so a client that matches bytes instead of parsing fails on it.
    """
    if style == "pretty":
        whole = {"event": event, "data": data, "broadcast": broadcast, "seq": seq}
        return json.dumps(whole, indent=2, sort_keys=True, ensure_ascii=True)
    return (
        f'{{"event": {go_json(event)}, "data": {go_json(data)}, '
        f'"broadcast": {go_json(broadcast)}, "seq": {seq}}}'
    )


def broadcast(*, channel_id: str = "", user_id: str = "") -> dict[str, Any]:
    """The broadcast object of websocket_message.go's WebsocketBroadcast (its JSON keys)."""
    return {
        "omit_users": None,
        "user_id": user_id,
        "channel_id": channel_id,
        "team_id": "",
        "connection_id": "",
        "omit_connection_id": "",
    }


def post_object(
    *,
    post_id: str,
    user_id: str,
    channel_id: str,
    message: str,
    create_at: int,
    root_id: str = "",
    props: dict[str, Any] | None = None,
    post_type: str = "",
    pending_post_id: str = "",
) -> dict[str, Any]:
    """A Post with the keys the server sends (rest/post.from_capture.json, plus file_ids)."""
    return {
        "id": post_id,
        "create_at": create_at,
        "update_at": create_at,
        "edit_at": 0,
        "delete_at": 0,
        "is_pinned": False,
        "user_id": user_id,
        "channel_id": channel_id,
        "root_id": root_id,
        "original_id": "",
        "message": message,
        "type": post_type,
        "props": props if props is not None else {},
        "hashtags": "",
        "file_ids": [],
        "pending_post_id": pending_post_id,
        "remote_id": "",
        "reply_count": 0,
        "last_reply_at": 0,
        "participants": None,
        "metadata": {},
    }


def posted_data(
    post: dict[str, Any],
    channel: dict[str, Any],
    sender_name: str,
    mentions: list[str],
) -> dict[str, Any]:
    """A `posted` event's data (ws/posted.*): the post and mentions as JSON strings."""
    data: dict[str, Any] = {
        "channel_display_name": channel["display_name"],
        "channel_name": channel["name"],
        "channel_type": channel["type"],
        "post": go_json(post),
        "sender_name": sender_name,
        "set_online": True,
        "team_id": channel["team_id"],
    }
    if mentions:  # the server adds the key only when someone is mentioned
        data["mentions"] = go_json(mentions)
    return data


def post_list(posts: list[dict[str, Any]], next_post_id: str = "") -> dict[str, Any]:
    """A PostList (rest/postlist.since.constructed.json): `order` newest first, as the server."""
    ordered = sorted(posts, key=lambda p: p["create_at"], reverse=True)
    return {
        "order": [p["id"] for p in ordered],
        "posts": {p["id"]: p for p in ordered},
        "next_post_id": next_post_id,
        "prev_post_id": "",
    }


def error_body(error_id: str, message: str, status: int) -> dict[str, Any]:
    """An error answer (rest/error_body.docs.json's keys)."""
    return {
        "id": error_id,
        "message": message,
        "request_id": new_id(),
        "status_code": status,
        "is_oauth": False,
    }
