"""The fake Mattermost server's data and REST routes: users, channels, posts (fake.py serves them).

Every method here runs in the fake's event loop (fake.py's `_call` puts the public ones there).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .wire import broadcast, error_body, go_json, new_id, post_list, post_object, posted_data

T = TypeVar("T")
PENDING_WINDOW_S = 30.0  # deduplicateCreatePost's window (the fixture's "30 s")
Answer = tuple[int, bytes]


def _answer(status: int, value: Any) -> Answer:
    return status, go_json(value).encode()


def _error(status: int, error_id: str, message: str) -> Answer:
    return _answer(status, error_body(error_id, message, status))


def unauthorized() -> Answer:
    return _error(401, "api.context.session_expired.app_error", "Invalid or expired session.")


def socket_action(raw: bytes, token: str, refuse: bool) -> tuple[str | None, str]:
    """A socket action's reply (ws/response_ok.json, ws/response_fail.json) and what it did."""
    try:
        req = json.loads(raw)
        seq, action, data = req["seq"], req["action"], req.get("data") or {}
    except (ValueError, KeyError, TypeError):
        return None, "ignored"
    if action == "authentication_challenge":
        if not refuse and data.get("token") == token:
            return go_json({"status": "OK", "seq_reply": seq}), "authenticated"
        fail = {"id": "api.web_socket_router.not_authenticated.app_error", "message": "refused"}
        return go_json({"status": "FAIL", "seq_reply": seq, "error": fail}), "refused"
    return go_json({"status": "OK", "seq_reply": seq}), "ok"


class Routes:
    """The server's data: users, channels, posts, and the pending_post_id cache."""

    _call: Callable[..., Any]
    _emit: Callable[[str, dict[str, Any], dict[str, Any]], None]

    def __init__(
        self,
        *,
        bot_user_id: str,
        owner_user_id: str,
        bot_username: str,
        owner_username: str,
        bot_is_bot: bool,
        max_post_size: int,
    ) -> None:
        self.max_post_size = max_post_size
        self.team_id = new_id()
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self._posts: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, tuple[str, float]] = {}  # pending_post_id -> (post id, when)
        self._last_ms = 0
        self.typing: list[dict[str, Any]] = []  # every users/me/typing body, in order
        self._fail: list[int] = []  # statuses the next REST requests get (fail_next)
        self.bot = self._user(bot_user_id, bot_username, is_bot=bot_is_bot)
        self.owner = self._user(owner_user_id, owner_username, is_bot=False)

    # ---- setup, from the tests ----

    def _user(self, user_id: str, username: str, *, is_bot: bool) -> dict[str, Any]:
        user = {"id": user_id, "username": username, "is_bot": is_bot, "delete_at": 0}
        self.users[user_id] = user
        return user

    def add_user(self, username: str, *, is_bot: bool = False, user_id: str = "") -> str:
        return str(
            self._call(lambda: self._user(user_id or new_id(), username, is_bot=is_bot))["id"]
        )

    def _channel(self, kind: str, name: str, display: str, creator: str = "") -> str:
        cid = new_id()
        team = "" if kind in "DG" else self.team_id
        now = self._now_ms()
        self.channels[cid] = {"id": cid, "type": kind, "name": name, "display_name": display}
        self.channels[cid] |= {"team_id": team, "delete_at": 0}
        # the rest of model.Channel's JSON keys (server/public/model/channel.go), as sent
        self.channels[cid] |= {
            "create_at": now,
            "update_at": now,
            "header": "",
            "purpose": "",
            "last_post_at": 0,
            "total_msg_count": 0,
            "extra_update_at": 0,
            "creator_id": creator,
            "scheme_id": None,
            "props": None,
            "group_constrained": None,
            "shared": False,
            "total_msg_count_root": 0,
            "policy_id": None,
            "last_root_post_at": 0,
        }
        return cid

    def _direct(self, a: str, b: str) -> tuple[str, bool]:
        """The DM channel of two users (named `<id>__<id>`, ids sorted, as model.GetDMNameFromIds)
        and whether it was made now."""
        name = "__".join(sorted([a, b]))
        for c in self.channels.values():
            if c["name"] == name and c["type"] == "D":
                return str(c["id"]), False
        return self._channel("D", name, f"@{self.users[b]['username']}"), True

    def direct_channel(self, user_id: str) -> str:
        """The DM channel between the bot and a user (named `<id>__<id>`, ids sorted)."""
        return str(self._call(lambda: self._direct(self.bot["id"], user_id)[0]))

    def open_channel(self, name: str, *, kind: str = "O") -> str:
        """A team channel: "O" open, "P" private (or "G" for a group message)."""
        return str(self._call(lambda: self._channel(kind, name, name.title())))

    def fail_next(self, n: int, status: int = 503) -> None:
        """The next n REST requests answer `status` (a 5xx is what a client retries)."""
        self._call(lambda: self._fail.extend([status] * n))

    # ---- posts ----

    def _now_ms(self) -> int:
        self._last_ms = max(int(time.time() * 1000), self._last_ms + 1)  # create_at never repeats
        return self._last_ms

    def post_as(
        self,
        user_id: str,
        channel_id: str,
        message: str,
        *,
        root_id: str = "",
        props: dict[str, Any] | None = None,
        type: str = "",  # the Post field's own name
    ) -> dict[str, Any]:
        """Store a post as `user_id` wrote it and send `posted` to every socket."""
        return dict(
            self._call(lambda: self._create(user_id, channel_id, message, root_id, props, type, ""))
        )

    def _create(
        self,
        user_id: str,
        channel_id: str,
        message: str,
        root_id: str,
        props: dict[str, Any] | None,
        post_type: str,
        pending: str,
    ) -> dict[str, Any]:
        post = post_object(
            post_id=new_id(),
            user_id=user_id,
            channel_id=channel_id,
            message=message,
            create_at=self._now_ms(),
            root_id=root_id,
            props=props,
            post_type=post_type,
            pending_post_id=pending,
        )
        self._posts.append(post)
        self._by_id[post["id"]] = post
        channel = self.channels[channel_id]
        mentions = [
            u["id"]
            for u in self.users.values()
            if re.search(rf"@{re.escape(u['username'])}\b", message)
        ]
        # a DM names no one unless the text does: ws/posted.dm.wire.captured.txt has no mentions
        sender = f"@{self.users.get(user_id, {'username': 'unknown'})['username']}"
        data = posted_data(post, channel, sender, mentions)
        self._emit("posted", data, broadcast(channel_id=channel_id))
        return post

    def posts(self, channel_id: str) -> list[dict[str, Any]]:
        """Everything stored in a channel, in order."""
        return list(self._call(lambda: [p for p in self._posts if p["channel_id"] == channel_id]))

    def bot_posts(self, channel_id: str) -> list[dict[str, Any]]:
        return [p for p in self.posts(channel_id) if p["user_id"] == self.bot["id"]]

    # ---- REST ----

    def route(self, method: str, path: str, query: dict[str, str], body: bytes) -> Answer:
        if self._fail:
            status = self._fail.pop(0)
            return _error(status, "app.fake.unavailable", "the fake was told to fail")
        parts = path.removeprefix("/api/v4/").split("/")
        match method, parts:
            case "GET", ["users", "me"]:
                return _answer(200, self.bot)
            case "GET", ["users", uid]:
                if uid not in self.users:  # api4/user.go getUser: the store's not-found
                    return _error(404, "app.user.missing_account.const", "Unable to find the user.")
                return _answer(200, self.users[uid])
            case "POST", ["channels", "direct"]:
                return self._create_direct(body)
            case "POST", ["users", "me" | _, "typing"]:
                return self._typing(body)
            case "GET", ["channels", cid]:
                if cid not in self.channels:
                    return _error(404, "app.channel.get.existing.app_error", "No channel")
                return _answer(200, self.channels[cid])
            case "GET", ["channels", cid, "posts"]:
                return self._channel_posts(cid, query)
            case "POST", ["posts"]:
                return self._create_post(body)
            case "GET", ["posts", pid]:
                if pid not in self._by_id:
                    return _error(404, "app.post.get.app_error", "No post")
                return _answer(200, self._by_id[pid])
            case "GET", ["posts", pid, "thread"]:
                if pid not in self._by_id or self._by_id[pid]["delete_at"]:  # a deleted root too
                    return _error(404, "app.post.get.app_error", "No post")
                root = self._by_id[pid]["root_id"] or pid
                thread = [p for p in self._posts if root in (p["id"], p["root_id"])]
                return _answer(200, post_list(thread))
            case "PUT", ["posts", pid, "patch"]:
                return self._patch(pid, body)
            case "POST", ["reactions"]:
                return self._react(body, "reaction_added")
            case "DELETE", ["users", uid, "posts", pid, "reactions", emoji]:
                raw = go_json({"user_id": uid, "post_id": pid, "emoji_name": emoji}).encode()
                return self._react(raw, "reaction_removed")
            case "GET", ["config", "client"]:
                return _answer(200, {"MaxPostSize": str(self.max_post_size), "Version": "10.11.0"})
        return _error(404, "api.context.404.app_error", f"no route {method} {path}")

    def _typing(self, body: bytes) -> Answer:
        try:
            req = json.loads(body)
            _ = req["channel_id"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "api.context.invalid_body_param.app_error", "bad typing body")
        self.typing.append(req)
        data = {"parent_id": req.get("parent_id", ""), "user_id": self.bot["id"]}
        bcast = broadcast(channel_id=req["channel_id"]) | {"omit_users": {self.bot["id"]: True}}
        self._emit("typing", data, bcast)
        return _answer(200, {"status": "OK"})

    def _create_direct(self, body: bytes) -> Answer:
        """POST /channels/direct (channels.yaml CreateDirectChannel; api4/channel.go
        createDirectChannel): a JSON array of two valid user ids, one of them the caller's; an
        unknown user is 400 invalid_user (app/channel.go); 201 and the channel, made or found
        (GetOrCreateDirectChannel); a new one is announced by `direct_added`."""
        try:
            ids = json.loads(body)
        except ValueError:
            ids = None
        if not isinstance(ids, list) or len(ids) != 2:
            return _error(400, "api.context.invalid_body_param.app_error", "Invalid user_ids.")
        if not all(isinstance(i, str) and re.fullmatch(r"[a-z0-9]{26}", i) for i in ids):
            return _error(400, "api.context.invalid_body_param.app_error", "Invalid user_id.")
        me = self.bot["id"]
        if me not in ids:
            return _error(403, "api.context.permissions.app_error", "You do not have permission.")
        if any(i not in self.users for i in ids):
            return _error(
                400, "api.channel.create_direct_channel.invalid_user.app_error", "Invalid user."
            )
        other = ids[1] if ids[0] == me else ids[0]
        cid, made = self._direct(me, other)
        if made:
            data = {"creator_id": me, "teammate_id": other}
            self._emit("direct_added", data, broadcast(channel_id=cid))
        return _answer(201, self.channels[cid])

    def _patch(self, pid: str, body: bytes) -> Answer:
        """PUT /posts/{id}/patch (rest/patch_post.request.json): post_edited follows."""
        if pid not in self._by_id:
            return _error(404, "app.post.get.app_error", "No post")
        try:
            message = json.loads(body)["message"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "api.context.invalid_body_param.app_error", "bad patch body")
        post = self._by_id[pid]
        post["message"] = message
        post["edit_at"] = post["update_at"] = self._now_ms()
        bcast = broadcast(channel_id=post["channel_id"])
        self._emit("post_edited", {"post": go_json(post)}, bcast)
        return _answer(200, post)

    def _react(self, body: bytes, event: str) -> Answer:
        """POST /reactions (rest/save_reaction.request.json) and its DELETE: reaction_* follows."""
        try:
            req = json.loads(body)
            post = self._by_id[req["post_id"]]
            reaction = {"user_id": req["user_id"], "post_id": post["id"]}
            reaction |= {"emoji_name": req["emoji_name"], "create_at": 0}
        except (ValueError, KeyError, TypeError):
            return _error(400, "api.context.invalid_body_param.app_error", "bad reaction")
        if event == "reaction_added":
            reaction["create_at"] = self._now_ms()
        bcast = broadcast(channel_id=post["channel_id"])
        self._emit(event, {"reaction": go_json(reaction)}, bcast)
        return _answer(200, reaction if event == "reaction_added" else {"status": "OK"})

    def delete_post(self, post_id: str) -> None:
        """As a user deleting a post in the web app: post_deleted follows."""

        def go() -> None:
            post = self._by_id[post_id]
            post["delete_at"] = post["update_at"] = self._now_ms()
            bcast = broadcast(channel_id=post["channel_id"])
            self._emit("post_deleted", {"post": go_json(post)}, bcast)

        self._call(go)

    def edit_post(self, post_id: str, message: str) -> None:
        """As its author editing a post in the web app: post_edited follows (the post, edited, as
        a JSON string: ws/post_edited.captured.json)."""

        def go() -> None:
            post = self._by_id[post_id]
            post["message"] = message
            post["edit_at"] = post["update_at"] = self._now_ms()
            self._emit(
                "post_edited", {"post": go_json(post)}, broadcast(channel_id=post["channel_id"])
            )

        self._call(go)

    def react(self, user_id: str, post_id: str, emoji: str) -> None:
        """As a user reacting in the web app: reaction_added (ws/reaction_added.captured.json)."""
        body = go_json({"user_id": user_id, "post_id": post_id, "emoji_name": emoji}).encode()
        self._call(lambda: self._react(body, "reaction_added"))

    def set_status(self, user_id: str, status: str) -> None:
        """A user goes online/away/offline: status_change to everyone."""
        data = {"status": status, "user_id": user_id}
        self._call(lambda: self._emit("status_change", data, broadcast(user_id=user_id)))

    def _channel_posts(self, cid: str, query: dict[str, str]) -> Answer:
        if cid not in self.channels:
            return _error(404, "app.channel.get.existing.app_error", "No channel")
        try:
            per_page = min(int(query.get("per_page", "60")), 200)
            page = int(query.get("page", "0"))
        except ValueError:
            return _error(400, "api.context.invalid_url_param.app_error", "bad paging")
        live = [p for p in self._posts if p["channel_id"] == cid and p["delete_at"] == 0]
        after = query.get("after", "")
        if after:  # the page of posts right after that one, and the next page's first id
            # getPostsAround: CreateAt > (SELECT CreateAt FROM Posts WHERE Id = ?), so a deleted
            # post still marks its place; an unknown one gives nothing
            mark = self._by_id.get(after)
            if mark is None or mark["channel_id"] != cid:
                return _answer(200, post_list([]))
            rest = [p for p in live if p["create_at"] > mark["create_at"]]
            page_posts = rest[page * per_page : (page + 1) * per_page]
            more = rest[(page + 1) * per_page : (page + 1) * per_page + 1]
            return _answer(200, post_list(page_posts, more[0]["id"] if more else ""))
        newest = live[::-1][page * per_page : (page + 1) * per_page]
        return _answer(200, post_list(newest))

    def _create_post(self, body: bytes) -> Answer:
        try:
            req = json.loads(body)
            channel_id, message = req["channel_id"], req.get("message", "")
        except (ValueError, KeyError, TypeError):
            return _error(400, "api.context.invalid_body_param.app_error", "bad post body")
        if channel_id not in self.channels:
            return _error(403, "api.context.permissions.app_error", "No such channel")
        root_id = req.get("root_id", "")
        root = self._by_id.get(root_id)
        if root_id and (root is None or root["root_id"] or root["delete_at"]):
            return _error(400, "api.post.create_post.root_id.app_error", "Invalid RootId")
        if len(message) > self.max_post_size:
            return _error(400, "model.post.is_valid.message_length.app_error", "Message too long")
        pending = req.get("pending_post_id", "")
        now = time.monotonic()
        if pending in self._pending and now - self._pending[pending][1] < PENDING_WINDOW_S:
            return _answer(201, self._by_id[self._pending[pending][0]])  # deduplicateCreatePost
        post = self._create(
            self.bot["id"], channel_id, message, root_id, req.get("props"), "", pending
        )
        if pending:
            self._pending[pending] = (post["id"], now)
        return _answer(201, post)
