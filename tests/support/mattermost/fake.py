"""A fake Mattermost server: REST and WebSocket on 127.0.0.1, in its own thread and event loop.

Written from ../shared/mattermost/ and the M4 brief's section 3, and pinned to the fixtures by
tests/gatewayd/test_fake_mattermost.py. One port serves both: a small HTTP/1.1 reader (stdlib
asyncio) answers the REST routes gatewayd uses, and hands `/api/v4/websocket` upgrades to
websockets' sans-IO ServerProtocol, so the fake decides every byte it writes (a deaf socket writes
none, not even pongs).

The socket follows web_conn.go: `hello` (seq 0) carries `connection_id`, every event has the next
seq, events wait in a bounded queue per connection while it is away, a resume
(`?connection_id=&sequence_number=`) replays from that queue with no hello, and a resume it cannot
serve gets a new connection_id and a new hello. Faults on demand: drop_after, go_deaf/wake,
restart, forget_connections, refuse_auth, slow_rest, slow_upgrades, rate_limit, lose_next.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

from . import routes
from .wire import STYLES, broadcast, event_frame, new_id

T = TypeVar("T")
SERVER_VERSION = "10.11.0.fake.0.false"  # <CurrentVersion>.<BuildNumber>.<ConfigHash>.<licensed>
DEAD_QUEUE = 128  # web_conn.go's deadQueueSize
KEEP_AWAY = 16  # connections kept for a resume while no socket holds them (oldest go first)


@dataclass(eq=False)  # kept in a set, by identity
class _Peer:
    """One accepted socket."""

    proto: ServerProtocol
    writer: asyncio.StreamWriter
    deaf: bool = False  # sends nothing ever again (go_deaf): no events, no pongs

    def flush(self) -> None:
        data = self.proto.data_to_send()
        if self.deaf or self.writer.is_closing():
            return
        for chunk in data:
            if chunk:
                self.writer.write(chunk)
            else:
                self.writer.close()

    def abort(self) -> None:
        transport = self.writer.transport
        if not transport.is_closing():
            transport.abort()


@dataclass
class _Conn:
    """A connection as the server keeps it across sockets: id, next seq, the replay queue."""

    id: str
    user_id: str
    next_seq: int = 0
    queue: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=DEAD_QUEUE))
    peer: _Peer | None = None


@dataclass
class Request_:
    """A REST request as the fake saw it (tests read `requests`)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lowered
    body: bytes


class FakeMattermost(routes.Routes):
    def __init__(
        self,
        *,
        bot_user_id: str = "",
        token: str = "",
        owner_user_id: str = "",
        bot_username: str = "boxbot",
        owner_username: str = "owner",
        bot_is_bot: bool = True,
        max_post_size: int = 16383,
        replay_limit: int = DEAD_QUEUE,
        style: str = "server",
        old_server: bool = False,
    ) -> None:
        super().__init__(
            bot_user_id=bot_user_id or new_id(),
            owner_user_id=owner_user_id or new_id(),
            bot_username=bot_username,
            owner_username=owner_username,
            bot_is_bot=bot_is_bot,
            max_post_size=max_post_size,
        )
        self.token = token or f"tok{new_id()}"
        self.replay_limit = replay_limit
        # a server before connection_id (ws/hello.docs.json, 3.6): hello without it, and every
        # connect a new connection (no resume: the query is not read)
        self.old_server = old_server
        if style not in STYLES:
            raise ValueError(f"style {style!r}: one of {STYLES}")
        self.style = style  # how socket events are spelled (wire.event_frame)
        self.url = ""
        self.requests: list[Request_] = []  # every REST request, in order
        self.upgrades: list[Request_] = []  # every socket upgrade asked for, in order
        self._conns: dict[str, _Conn] = {}
        self._peers: set[_Peer] = set()
        self._hung: set[asyncio.StreamWriter] = set()  # upgrades held while deaf
        self._refuse = False
        self._upgrade_status = 0  # refuse_upgrades: the status every upgrade gets, 0: none
        self._slow = 0.0
        self._slow_upgrade = 0.0
        self._limited: list[tuple[int, float | None, bool]] = []  # (n left, wait, reset header)
        self._drop_after: int | None = None
        self._lose = 0
        self._lost_answers = 0
        self._deaf = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._changed = threading.Condition()
        self._port = 0

    # ---- life ----

    def start(self) -> None:
        """Listen (again: after stop(), on the same port, as a restarted server would, with its
        connections and pending ids forgotten and its posts kept)."""
        self._conns.clear()
        self._peers.clear()
        self._hung.clear()
        self._pending.clear()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the fake Mattermost server did not start within 30 s")
        self.url = f"http://127.0.0.1:{self._port}"

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # this thread's own
        self._loop = loop
        self._server = loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self._port)
        )
        self._port = self._server.sockets[0].getsockname()[1]
        ready.set()
        loop.run_forever()
        tasks = asyncio.all_tasks(loop)  # connections still open at stop: end them in the loop
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return

        def down() -> None:
            self._drop_all()
            for w in self._hung:
                w.transport.abort()
            assert self._server is not None
            self._server.close()

        self._call(down)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop = None

    def __enter__(self) -> FakeMattermost:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, fn: Callable[[], T]) -> T:
        """Run fn in the server's loop and return its result: the state is the loop's alone."""
        assert self._loop is not None, "the fake is not started"
        if threading.current_thread() is self._thread:
            return fn()  # already in the loop (a wait_for predicate calling a public method)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as e:
                done.set_exception(e)
            self._notify()

        self._loop.call_soon_threadsafe(run)
        return done.result(30)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until predicate() (read in the server's loop) holds, at most `timeout` s."""
        deadline = time.monotonic() + timeout
        while not self._call(predicate):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"fake Mattermost: not {what} within {timeout} s")
            with self._changed:  # woken by any change in the server; re-read at least every 50 ms
                self._changed.wait(min(left, 0.05))

    def live_sockets(self) -> int:
        """Sockets open and answering (deaf ones do not count)."""
        return self._call(lambda: sum(1 for p in self._peers if not p.deaf))

    def connection_ids(self) -> list[str]:
        return self._call(lambda: list(self._conns))

    # ---- faults ----

    def restart(self) -> None:
        """As a server restart: every socket dropped, every connection and pending id forgotten."""

        def go() -> None:
            self._drop_all()
            self._conns.clear()
            self._pending.clear()

        self._call(go)

    def forget_connections(self) -> None:
        """The next resume of any connection gets a new connection_id and hello (lossy)."""

        def go() -> None:
            for conn in self._conns.values():
                if conn.peer is not None:
                    conn.peer.abort()
            self._conns.clear()

        self._call(go)

    def drop_after(self, n_events: int) -> None:
        """Close every socket right after the next n events are sent (0: now)."""

        def go() -> None:
            self._drop_after = n_events
            if n_events == 0:
                self._drop_all()
                self._drop_after = None

        self._call(go)

    def lose_next(self, n_events: int) -> None:
        """The next n events take a seq but are never sent nor kept: the client sees a gap."""
        self._call(lambda: setattr(self, "_lose", n_events))

    def lose_answers(self, n: int) -> None:
        """The next n REST requests are carried out, then their connection drops unanswered."""
        self._call(lambda: setattr(self, "_lost_answers", n))

    def go_deaf(self) -> None:
        """Open sockets send nothing more (no pongs either); new upgrades are held unanswered."""

        def go() -> None:
            self._deaf = True
            for p in self._peers:
                p.deaf = True

        self._call(go)

    def wake(self) -> None:
        """New upgrades are answered again; held ones are dropped (the client retries)."""

        def go() -> None:
            self._deaf = False
            for w in self._hung:
                w.transport.abort()
            self._hung.clear()

        self._call(go)

    def refuse_auth(self, on: bool) -> None:
        self._call(lambda: setattr(self, "_refuse", on))

    def refuse_upgrades(self, status: int) -> None:
        """Every socket upgrade is answered `status` (0: accepted again) while REST works: what a
        proxy in front of the server that does not pass upgrades gets from the server (a plain
        GET of /api/v4/websocket: 400 from the upgrader), or says itself (502, 404)."""
        self._call(lambda: setattr(self, "_upgrade_status", status))

    def slow_rest(self, seconds: float) -> None:
        self._call(lambda: setattr(self, "_slow", seconds))

    def slow_upgrades(self, seconds: float) -> None:
        """Every socket upgrade is answered only after `seconds` (0: at once again)."""
        self._call(lambda: setattr(self, "_slow_upgrade", seconds))

    def rate_limit(self, n: int, *, retry_after: float | None, reset_header: bool) -> None:
        """The next n REST requests get 429, saying `retry_after` seconds in Retry-After, or in
        X-RateLimit-Reset (whole seconds, as Mattermost) when reset_header; None: no header."""
        self._call(lambda: self._limited.append((n, retry_after, reset_header)))

    # ---- events ----

    def emit(self, event: str, data: dict[str, Any], *, channel_id: str = "") -> None:
        """Send any event (typing, post_edited, ...) to every connection, as the hub does."""
        self._call(lambda: self._emit(event, data, broadcast(channel_id=channel_id)))

    def _emit(self, event: str, data: dict[str, Any], bcast: dict[str, Any]) -> None:
        for conn in list(self._conns.values()):
            seq = conn.next_seq
            conn.next_seq += 1
            if self._lose:
                continue
            text = event_frame(event, data, bcast, seq, self.style)
            conn.queue.append((seq, text))
            if conn.peer is not None:
                self._send(conn.peer, text)
        if self._lose:
            self._lose -= 1
        if self._drop_after is not None:
            self._drop_after -= 1
            if self._drop_after <= 0:
                self._drop_after = None
                self._drop_all()

    def _send(self, peer: _Peer, text: str) -> None:
        peer.proto.send_text(text.encode())
        peer.flush()

    def _drop_all(self) -> None:
        for p in list(self._peers):
            p.abort()

    # ---- the one port ----

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                    return
                req = _parse_head(head)
                n = int(req.headers.get("content-length", "0") or 0)
                req.body = await reader.readexactly(n) if n else b""
                if req.path == "/api/v4/websocket":
                    await self._websocket(reader, writer, head, req)
                    return
                await self._rest(req, writer)
                self._notify()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()

    def _authed(self, req: Request_) -> bool:
        return not self._refuse and req.headers.get("authorization") == f"Bearer {self.token}"

    async def _rest(self, req: Request_, writer: asyncio.StreamWriter) -> None:
        self.requests.append(req)
        if self._slow:
            await asyncio.sleep(self._slow)
        if self._limited:
            n, wait, reset = self._limited[0]
            self._limited[0] = (n - 1, wait, reset)
            if n - 1 <= 0:
                self._limited.pop(0)
            _write(writer, 429, b"limit exceeded\n", _limit_headers(wait, reset), "text/plain")
            return
        if not self._authed(req):
            status, body = routes.unauthorized()
        else:
            status, body = self.route(req.method, req.path, req.query, req.body)
        if self._lost_answers:  # done, but the answer never arrives: the client must retry
            self._lost_answers -= 1
            writer.transport.abort()
            return
        _write(writer, status, body, _OK_LIMIT_HEADERS)

    async def _websocket(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, req: Request_
    ) -> None:
        self.upgrades.append(req)
        self._notify()
        if self._deaf:
            self._hung.add(writer)
            await reader.read()  # held: answered by nothing until the client or wake() drops it
            return
        if self._slow_upgrade:
            await asyncio.sleep(self._slow_upgrade)
        proto = ServerProtocol(max_size=2**20)
        has_header = "authorization" in req.headers
        if (has_header and not self._authed(req)) or self._refuse:
            status, body = routes.unauthorized()
            _write(writer, status, body, {})
            return
        if self._upgrade_status:
            _write(writer, self._upgrade_status, b"Bad Request\n", {}, "text/plain")
            return
        proto.receive_data(head)
        [request] = proto.events_received()
        assert isinstance(request, Request)
        proto.send_response(proto.accept(request))
        peer = _Peer(proto, writer)
        peer.flush()
        self._peers.add(peer)
        conn: _Conn | None = None
        try:
            if has_header:
                conn = self._attach(peer, req.query)
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                proto.receive_data(data)
                for frame in proto.events_received():
                    if isinstance(frame, Frame) and frame.opcode is Opcode.TEXT:
                        conn = self._action(peer, conn, bytes(frame.data)) or conn
                peer.flush()  # pongs to the client's pings go out here (none when deaf)
        finally:
            self._peers.discard(peer)
            if conn is not None and conn.peer is peer:
                conn.peer = None
            self._notify()

    def _attach(self, peer: _Peer, query: dict[str, str]) -> _Conn:
        """A new connection (hello), or a resume: replay, nothing missed, or new id + hello."""
        cid = "" if self.old_server else query.get("connection_id", "")
        wanted = query.get("sequence_number", "")
        conn = self._conns.get(cid) if cid else None
        if conn is not None and wanted.isdigit():
            seq = int(wanted)
            held = [t for s, t in conn.queue if s >= seq]
            found = any(s == seq for s, _ in conn.queue)
            if found or seq == conn.next_seq:
                if conn.peer is not None:
                    conn.peer.abort()
                conn.peer = peer
                for text in held if found else []:
                    self._send(peer, text)
                return conn
            del self._conns[cid]
        away = [c for c in self._conns.values() if c.peer is None]
        for old in away[: max(0, len(away) - KEEP_AWAY)]:  # the server expires idle ones too
            del self._conns[old.id]
        conn = _Conn(new_id(), self.bot["id"], queue=deque(maxlen=self.replay_limit))
        self._conns[conn.id] = conn
        conn.peer = peer
        hello_data = {"server_version": SERVER_VERSION, "connection_id": conn.id}
        if self.old_server:
            del hello_data["connection_id"]
        hello = event_frame("hello", hello_data, broadcast(user_id=self.bot["id"]), 0, self.style)
        conn.next_seq = 1
        conn.queue.append((0, hello))
        self._send(peer, hello)
        return conn

    def _action(self, peer: _Peer, conn: _Conn | None, raw: bytes) -> _Conn | None:
        """A client action (ws/*.request.json): authentication_challenge, user_typing."""
        reply, action_ok = routes.socket_action(raw, self.token, self._refuse)
        if reply is not None:
            self._send(peer, reply)
        if action_ok == "authenticated" and conn is None:
            return self._attach(peer, {})
        if action_ok == "refused":
            peer.abort()
        return None


def _parse_head(head: bytes) -> Request_:
    line, *lines = head.decode("latin-1").split("\r\n")
    method, target, _ = line.split(" ", 2)
    parts = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    headers = {}
    for h in lines:
        if h:
            k, _, v = h.partition(":")
            headers[k.strip().lower()] = v.strip()
    return Request_(method, parts.path, query, headers, b"")


# what a rate-limited server says on every answer (rest/login_200_headers.docs.http)
_OK_LIMIT_HEADERS = {
    "X-Ratelimit-Limit": "10",
    "X-Ratelimit-Remaining": "9",
    "X-Ratelimit-Reset": "1",
}


def _limit_headers(wait: float | None, reset: bool) -> dict[str, str]:
    """A 429's: X-RateLimit-* as rest/429_rate_limited.docs.http, Retry-After, or none."""
    if wait is None:
        return {}
    if reset:
        return {
            "X-RateLimit-Limit": "10",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(math.ceil(wait)),
        }
    return {"Retry-After": f"{wait:g}"}


_REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}
_REASONS |= {404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}


def _write(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    headers: dict[str, str],
    content_type: str = "application/json",
) -> None:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [
        f"Content-Type: {content_type}; charset=utf-8",
        f"Content-Length: {len(body)}",
        f"Date: {formatdate(usegmt=True)}",
        f"X-Request-Id: {new_id()}",
        "X-Version-Id: fake",
        "",
        "",
    ]
    writer.write("\r\n".join(lines).encode("latin-1") + body)
