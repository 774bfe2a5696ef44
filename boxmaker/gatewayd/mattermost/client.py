"""gatewayd's Mattermost client: the WebSocket (websockets) and the REST API (httpx).

One bot token, sent as `Authorization: Bearer` on the upgrade (the server resumes a socket only
when it knows the session then) and on every REST call. The socket's rules are protocol.py's; this
module is their I/O: its own pings with a pong timeout, a no-frame timeout, reconnects for ever
with full-jitter backoff. REST calls retry 5xx and transport errors, and honour 429's wait, within
rest_timeout_ms. The token never appears in an error or a repr (docs/decisions/gateway-client.md).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from .protocol import SocketState, backoff_ms, retry_wait_s
from .types import (
    Connected,
    MattermostError,
    Me,
    Post,
    Posted,
    loads_object,
    parse_event,
    post_list,
    redact,
)

DEFAULT_MAX_POST_CHARS = 16383  # the server's MaxPostSize default (posts hold runes, not bytes)


@dataclass(frozen=True)
class ClientLimits:
    ping_interval_ms: int = 30_000
    pong_timeout_ms: int = 10_000
    silence_ms: int = 90_000  # no frame at all (pongs count) for this long: the socket is dead
    rest_timeout_ms: int = 15_000  # one REST call, its retries and waits included
    backoff_max_ms: int = 60_000
    backoff_base_ms: int = 500


class _TimedConnection(ClientConnection):
    """A client connection that notes when bytes last arrived: pongs and pings count as life."""

    last_bytes = 0.0
    died = ""  # why the client gave up on it, when it did

    def data_received(self, data: bytes) -> None:
        self.last_bytes = self.loop.time()
        super().data_received(data)


class _Dead(Exception):
    """The socket is alive at TCP level but says nothing: close it and reconnect."""


class MattermostClient:
    def __init__(self, url: str, token: str, limits: ClientLimits | None = None) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise MattermostError(f"server url {url!r}: give it as https://host[:port]")
        self._url = urlunsplit(parts)
        ws_scheme = "wss" if parts.scheme == "https" else "ws"
        self._ws_url = urlunsplit(
            (ws_scheme, parts.netloc, parts.path + "/api/v4/websocket", "", "")
        )
        self._token = token
        self._auth = {"Authorization": f"Bearer {token}"}
        self.limits = limits or ClientLimits()
        self._http = httpx.AsyncClient(
            base_url=self._url + "/api/v4",
            headers=self._auth,
            timeout=self.limits.rest_timeout_ms / 1000,
            follow_redirects=False,
        )
        self._closing = False
        self._closed = asyncio.Event()
        self._ws: ClientConnection | None = None
        self.state = SocketState()  # read by tests: the id and seq the next resume names
        self.socket_failures = 0  # upgrades that failed or sockets that died, for status lines
        self.last_socket_error = ""  # the latest of those, redacted

    def __repr__(self) -> str:
        return f"MattermostClient({self._url!r})"

    def _error(self, what: str, status: int | None = None) -> MattermostError:
        return MattermostError(redact(what, self._token), status)

    # ---- the socket ----

    async def events(self) -> AsyncIterator[Posted | Connected]:
        """Posted and Connected, for ever; ends only when close() is called.

        A refused token (401/403 on the upgrade) raises MattermostError: retrying cannot help.
        """
        attempt = 0
        while not self._closing:
            ws = await self._connect()
            if ws is None:
                await self._pause(attempt)
                attempt += 1
                continue
            watch = asyncio.create_task(self._keepalive(ws))
            opened = ws.loop.time()
            try:
                self.state.opened()
                async for text in self._frames(ws):
                    for item in self.state.feed(text):
                        if isinstance(item, Connected):
                            attempt = 0  # the server answered: the next drop starts afresh
                        yield item
            finally:
                watch.cancel()
                ws.transport.abort()
                self._ws = None
            if ws.loop.time() - opened > self._keepalive_s():
                attempt = 0  # it outlived a ping round: a drop now is news, not a failing server
            if not self._closing:
                self._failed(ws.died or "the socket closed")
                await self._pause(attempt)
                attempt += 1

    async def _connect(self) -> _TimedConnection | None:
        open_s = self.limits.pong_timeout_ms / 1000  # an upgrade unanswered is a missing pong
        try:
            ws = await connect(
                self.state.url(self._ws_url),
                additional_headers=self._auth,
                open_timeout=open_s,
                ping_interval=None,  # our own keepalive: it aborts at once on a missing pong
                close_timeout=self.limits.pong_timeout_ms / 1000,
                max_size=2**22,
                create_connection=_TimedConnection,
            )
        except InvalidStatus as e:
            status = e.response.status_code
            if status in (401, 403):
                raise self._error(
                    f"the Mattermost server refused the bot's token ({status}) on the socket: "
                    "check the token file and that the bot account is enabled",
                    status,
                ) from None
            self._failed(f"the upgrade was answered {status}")
            return None
        except (OSError, TimeoutError, WebSocketException) as e:
            self._failed(f"the upgrade failed: {type(e).__name__}: {e}")
            return None
        assert isinstance(ws, _TimedConnection)
        if self._closing:  # close() came while the upgrade was on the wire: serve nothing
            ws.transport.abort()
            return None
        ws.last_bytes = ws.loop.time()
        self._ws = ws
        return ws

    async def hello(self) -> str:
        """One upgrade with the token and its first frame, which must be `hello`: its
        connection_id ("" from an old server). For a check (verify-device); events() is the
        service. A refused token or upgrade, no answer within pong_timeout_ms, or a first frame
        that is not hello raises MattermostError saying which."""
        bound = self.limits.pong_timeout_ms / 1000
        try:
            async with asyncio.timeout(bound):
                ws = await connect(self._ws_url, additional_headers=self._auth, ping_interval=None)
                try:
                    frame = await ws.recv()
                finally:
                    await ws.close()
        except InvalidStatus as e:
            status = e.response.status_code
            raise self._error(f"the socket upgrade was answered {status}", status) from None
        except TimeoutError:
            raise self._error(f"no hello on the socket within {bound:g} s") from None
        except (OSError, WebSocketException) as e:
            raise self._error(f"the socket upgrade failed: {type(e).__name__}: {e}") from None
        event = parse_event(frame)
        if event is None or event.event != "hello":
            raise self._error("the socket's first frame is not a hello")
        return cid if isinstance(cid := event.data.get("connection_id"), str) else ""

    def _failed(self, why: str) -> None:
        self.socket_failures += 1
        self.last_socket_error = redact(why, self._token)

    def _keepalive_s(self) -> float:
        return (self.limits.ping_interval_ms + self.limits.pong_timeout_ms) / 1000

    async def _frames(self, ws: _TimedConnection) -> AsyncIterator[str | bytes]:
        silence = self.limits.silence_ms / 1000
        while True:
            remaining = silence - (ws.loop.time() - ws.last_bytes)
            if remaining <= 0:
                ws.died = f"no frame for {self.limits.silence_ms} ms"
                return  # deaf: the caller aborts and reconnects
            try:
                async with asyncio.timeout(remaining):
                    text = await ws.recv()
            except TimeoutError:
                continue  # re-check: a pong may have come meanwhile
            except WebSocketException:
                return
            yield text

    async def _keepalive(self, ws: _TimedConnection) -> None:
        interval = self.limits.ping_interval_ms / 1000
        pong = self.limits.pong_timeout_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                async with asyncio.timeout(pong):
                    waiter = await ws.ping()
                    await waiter
            except (TimeoutError, WebSocketException):
                ws.died = f"no pong within {self.limits.pong_timeout_ms} ms"
                ws.transport.abort()  # no pong: the read loop ends, events() reconnects
                return

    async def _pause(self, attempt: int) -> None:
        lim = self.limits
        delay = backoff_ms(attempt, lim.backoff_base_ms, lim.backoff_max_ms, random.random())
        try:
            async with asyncio.timeout(delay / 1000):
                await self._closed.wait()
        except TimeoutError:
            pass

    async def close(self) -> None:
        self._closing = True
        self._closed.set()
        if self._ws is not None:
            self._ws.transport.abort()
        await self._http.aclose()

    # ---- REST ----

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | list[str] | None = None,
        params: Mapping[str, str | int] | None = None,
    ) -> Any:
        """One call with its retries; the parsed JSON body (None when empty)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.rest_timeout_ms / 1000
        what = f"{method} {path}"
        last, last_status = "no answer", None
        attempt = 0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                limit = self.limits.rest_timeout_ms
                raise self._error(f"{what}: {last} within {limit} ms", last_status)
            try:
                r = await self._http.request(
                    method, path, json=body, params=params, timeout=remaining
                )
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                last_status = None
                wait = self._backoff_s(attempt)
            else:
                if r.status_code < 300:
                    return self._body(what, r)
                if r.status_code == 429:
                    asked = retry_wait_s(r.headers, time.time())
                    wait = self._backoff_s(attempt) if asked is None else asked
                    if loop.time() + wait > deadline:
                        raise self._error(f"{what}: rate limited, retry in {wait:.1f} s", 429)
                    last, last_status = "429 rate limited", 429
                elif r.status_code >= 500:
                    last, last_status = f"{r.status_code} {self._server_says(r)}", r.status_code
                    wait = self._backoff_s(attempt)
                else:
                    hint = (
                        " (a redirect: give the server's final url)" if r.status_code < 400 else ""
                    )
                    says = self._server_says(r)
                    raise self._error(f"{what}: {r.status_code} {says}{hint}", r.status_code)
            attempt += 1
            await asyncio.sleep(min(wait, max(0.0, deadline - loop.time())))

    def _body(self, what: str, r: httpx.Response) -> Any:
        if not r.content:
            return None
        try:
            return json.loads(r.content)
        except ValueError:
            raise self._error(f"{what}: {r.status_code} with a body that is not JSON") from None

    def _backoff_s(self, attempt: int) -> float:
        lim = self.limits
        return backoff_ms(attempt, lim.backoff_base_ms, lim.backoff_max_ms, random.random()) / 1000

    @staticmethod
    def _server_says(r: httpx.Response) -> str:
        """The error body's message (rest/error_body.docs.json), else the reason phrase."""
        try:
            body = loads_object(r.content, "error body")
            msg = body.get("message")
            if isinstance(msg, str) and msg:
                return msg[:200]
        except MattermostError:
            pass
        return r.reason_phrase

    async def me(self) -> Me:
        """GET /users/me (is_bot is the caller's to check)."""
        return Me.from_json(await self._request("GET", "/users/me"))

    async def create_post(
        self,
        channel_id: str,
        message: str,
        *,
        root_id: str = "",
        props: Mapping[str, Any] | None = None,
        pending_post_id: str,
    ) -> Post:
        """POST /posts; pending_post_id makes a retried create land once (server-side, briefly)."""
        body: dict[str, Any] = {
            "channel_id": channel_id,
            "message": message,
            "root_id": root_id,
            "pending_post_id": pending_post_id,
        }
        if props:
            body["props"] = dict(props)
        return Post.from_json(await self._request("POST", "/posts", body=body))

    async def posts_after(
        self, channel_id: str, after_post_id: str, *, per_page: int = 200
    ) -> list[Post]:
        """One page of the posts after a post, oldest first (catch-up; never `since=`)."""
        params: dict[str, str | int] = {"after": after_post_id, "per_page": per_page}
        return post_list(
            await self._request("GET", f"/channels/{_seg(channel_id)}/posts", params=params)
        )

    async def latest_posts(self, channel_id: str, *, per_page: int = 200) -> list[Post]:
        """The newest `per_page` posts of a channel, oldest first."""
        params: dict[str, str | int] = {"page": 0, "per_page": per_page}
        return post_list(
            await self._request("GET", f"/channels/{_seg(channel_id)}/posts", params=params)
        )

    async def thread(self, root_id: str) -> list[Post]:
        """A thread's root and replies, oldest first."""
        return post_list(await self._request("GET", f"/posts/{_seg(root_id)}/thread"))

    async def typing(self, channel_id: str, parent_id: str = "") -> None:
        body = {"channel_id": channel_id, "parent_id": parent_id}
        await self._request("POST", "/users/me/typing", body=body)

    async def channel_type(self, channel_id: str) -> str:
        """GET /channels/{id}: "D" direct, "G" group, "O" open, "P" private."""
        d = await self._request("GET", f"/channels/{_seg(channel_id)}")
        kind = d.get("type") if isinstance(d, Mapping) else None
        if not isinstance(kind, str):
            raise MattermostError(f"channel {channel_id!r}: the server gave no 'type'")
        return kind

    async def user(self, user_id: str) -> Me:
        """GET /users/{id}: a user the server knows (404 when it does not)."""
        return Me.from_json(await self._request("GET", f"/users/{_seg(user_id)}"))

    async def direct_channel(self, user_id: str, other_id: str) -> str:
        """POST /channels/direct [a, b]: the id of the DM channel between two users, made if it
        is not there yet (the server gets or creates it: the same id every time)."""
        d = await self._request("POST", "/channels/direct", body=[user_id, other_id])
        cid = d.get("id") if isinstance(d, Mapping) else None
        kind = d.get("type") if isinstance(d, Mapping) else None
        if not isinstance(cid, str) or not cid or kind != "D":
            raise MattermostError("channels/direct: the answer is not a direct channel")
        return cid

    async def max_post_chars(self) -> int:
        """The server's MaxPostSize from its client config, else 16383."""
        d = await self._request("GET", "/config/client", params={"format": "old"})
        value = d.get("MaxPostSize") if isinstance(d, Mapping) else None
        try:
            size = int(value) if isinstance(value, str | int) else 0
        except ValueError:
            size = 0
        return size if size > 0 else DEFAULT_MAX_POST_CHARS


def _seg(value: str) -> str:
    """An id as one path segment: an id with '/' or '..' in it cannot reach another route."""
    return quote(value, safe="")
