"""`brokerd serve --config <toml>`: broker.sock for loopd, owner.sock for the owner, and (when
the owner turned chat approvals on) chat.sock for gatewayd (chat_approvals.py).

Each is bound 0600 in a folder only brokerd can change (`_daemon.listener`); each connection is
checked with SO_PEERCRED against the ONE uid that socket serves (root gets no exception):
broker.sock `loopd_uid`, owner.sock `owner_uid`, chat.sock gatewayd's (never loopd's). A socket
for another uid than brokerd's is chowned to it (still 0600), which needs CAP_CHOWN
(docs/operations.md). Every connection gets a thread; SIGTERM or SIGINT stops the accept loop.

Bounds, so that loopd cannot exhaust brokerd: at most `[broker] max_connections` connections
open at once on each socket (one more gets an error frame that names the key, and is closed),
and at most `[broker] max_held` calls waiting for the owner (one more is denied at once, with a
result that says why).
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from boxmaker._cli import ExitStatus
from boxmaker._daemon import SetupError
from boxmaker._daemon.listener import UnixListener, bind_unix_listener
from boxmaker._daemon.log import DaemonLog
from boxmaker._daemon.peer import peer_credentials
from boxmaker._daemon.signals import stop_signals
from boxmaker.brokerd.approvals import Held
from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.chat_approvals import CHAT_SETTING, ChatDesk, Route, banner, check_uids
from boxmaker.brokerd.config import BrokerConfig
from boxmaker.brokerd.conn import Conn
from boxmaker.brokerd.grants import GrantsError
from boxmaker.brokerd.mcp.config import McpServerConfig
from boxmaker.brokerd.policy import LogError
from boxmaker.brokerd.sandbox import Sandbox, SandboxLimits
from boxmaker.brokerd.state import FAILED, READY, STOPPED, state_path, write_state
from boxmaker.brokerd.tools.table import BUILTIN, Family, Table
from boxmaker.proto import ToolResponse
from boxmaker.proto.broker import (
    BROKER_KINDS,
    CHAT_KINDS,
    OWNER_KINDS,
    Answer,
    Answered,
    ApprovalNeeded,
    CallBody,
    Claim,
)
from boxmaker.proto.errors import BodyError, FrameError
from boxmaker.proto.frame import MAX_FRAME_BYTES

PROG = "brokerd"
WATCH_S = 0.1  # how often a call in progress looks at whether loopd is still there
CANCELLED = "cancelled: loopd closed the call"
# SIGHUP too, as loopd (issue 38 item 5): brokerd has nothing to reload (the grants are read at
# start and by "always"); log rotators and supervisorctl send it: a clean stop, not a death.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _bind(path: str, uid: int, setting: str) -> UnixListener:
    listener = bind_unix_listener(path, setting=setting)
    if uid != os.geteuid():
        try:
            os.chown(path, uid, -1)
        except OSError as exc:
            listener.close()
            raise SetupError(
                f"{setting}: cannot give {path} to uid {uid}: {exc} (brokerd needs "
                "CAP_CHOWN to serve another user; see docs/operations.md)"
            ) from None
    return listener


def _peer_uid(sock: socket.socket) -> int | None:
    try:
        return peer_credentials(sock).uid
    except OSError:
        return None


class Server:
    def __init__(self, broker: Broker, log: DaemonLog) -> None:
        self.broker = broker
        self.log = log
        self._open: dict[str, int] = {}  # socket name -> connections open on it
        self._open_lock = threading.Lock()
        self._held_lock = threading.Lock()

    def admit(self, name: str) -> bool:
        """Counts one more connection on `name`, or False when it is at max_connections."""
        with self._open_lock:
            if self._open.get(name, 0) >= self.broker.config.max_connections:
                return False
            self._open[name] = self._open.get(name, 0) + 1
            return True

    def release(self, name: str) -> None:
        with self._open_lock:
            self._open[name] -= 1

    def over_held(self, held: Held) -> bool:
        """True (and the call denied) when `held` is one more than max_held waiting calls."""
        limit = self.broker.config.max_held
        with self._held_lock:
            if len(self.broker.approvals.pending()) <= limit:
                return False
        why = f"refused: {limit} calls already wait for the owner ([broker] max_held)"
        self.broker.approvals.deny(held.id, why)
        return True

    def serve_loopd(self, sock: socket.socket) -> None:
        conn = Conn(sock, BROKER_KINDS)
        with sock:
            try:
                while (frame := conn.recv()) is not None:
                    if frame.kind == "list":
                        conn.send("tools", {"tools": self.tool_list()}, True)
                    elif frame.kind == "call" and (b := _call_body(frame.body)) is not None:
                        resp = self._call(conn, sock, b)
                        conn.send("result", resp.to_json(), True)
                    else:
                        conn.error(
                            "broker.sock takes list or call {tool, arguments, session?, "
                            f"epoch?}}, got {frame.kind}"
                        )
                        return
            except (FrameError, OSError) as exc:
                with contextlib.suppress(OSError):
                    conn.error(str(exc))

    def tool_list(self) -> list[dict[str, object]]:
        """The tools for `list`, in one frame whatever a server listed: the builtins first, then
        each MCP tool while the frame has room (the rest left out, said in the log). A failure
        of the listing itself gives the builtins alone."""
        try:
            schemas = self.broker.tools()
        except Exception as exc:  # one server must not take every tool from loopd
            self.log.warn(f"list: the MCP tools are left out: {type(exc).__name__}: {exc}")
            schemas = self.broker.own_tools()
        tools: list[dict[str, object]] = []
        room = MAX_FRAME_BYTES - 4096
        left_out = []
        for schema in schemas:
            try:
                item = schema.to_json()
                size = len(orjson.dumps(item)) + 1
            except (TypeError, orjson.JSONEncodeError):
                left_out.append(schema.name)
                continue
            if size > room:
                left_out.append(schema.name)
                continue
            room -= size
            tools.append(item)
        if left_out:
            self.log.warn(f"list: {len(left_out)} tool(s) left out (one frame): {left_out[:5]}")
        return tools

    def _call(self, conn: Conn, sock: socket.socket, body: CallBody) -> ToolResponse:
        """One call, watched: loopd closing its end (its tool_timeout_ms passed: it shuts its
        writing side and waits for this answer; or it died) cancels it. A held ask is denied, a
        running command is killed, a tool not yet started never starts, and the result says
        which; a tool already done answers as it ran. So loopd and brokerd agree on the fate."""
        gone, over = threading.Event(), threading.Event()
        held_now: list[Held] = []

        def notify(held: Held, brief: str) -> None:
            if self.over_held(held):
                return
            held_now.append(held)
            if gone.is_set():
                self.broker.approvals.deny(held.id, CANCELLED, withdrawn=True)
                return
            needed = ApprovalNeeded(held.id, held.call.tool, brief)
            conn.send("approval_needed", needed.to_json(), False)

        watch = threading.Thread(target=self._watch, args=(sock, gone, over, held_now))
        watch.daemon = True
        watch.start()
        try:
            return self.broker.call(
                body.tool, body.arguments, notify, body.session, body.epoch, cancelled=gone.is_set
            )
        finally:
            over.set()

    def _watch(
        self, sock: socket.socket, gone: threading.Event, over: threading.Event, held: list[Held]
    ) -> None:
        """Until the call is over: loopd's end closing sets `gone` and denies a held ask."""
        while not over.is_set():
            try:
                readable, _, _ = select.select([sock], [], [], WATCH_S)
                if readable and sock.recv(1, socket.MSG_PEEK) == b"":
                    gone.set()
                    for h in held:
                        self.broker.approvals.deny(h.id, CANCELLED, withdrawn=True)
                    return
            except (OSError, ValueError):  # closed meanwhile: the call is over
                return
            if readable:
                return  # bytes mid-call: a protocol error, dealt with after the call

    def serve_owner(self, sock: socket.socket) -> None:
        conn = Conn(sock, OWNER_KINDS)
        approvals = self.broker.approvals
        claimed: set[str] = set()
        with sock:
            try:
                while (frame := conn.recv()) is not None:
                    body = frame.body
                    if frame.kind == "pending":
                        conn.send(
                            "pending", {"calls": [h.view() for h in approvals.pending()]}, True
                        )
                    elif frame.kind == "claim" and (c := _typed(Claim, body)) is not None:
                        held = approvals.get(c.id)
                        if held is None:
                            conn.error(approvals.not_held(c.id))
                            continue
                        claimed.add(held.id)
                        conn.send("call", held.view(), True)
                    elif frame.kind == "answer" and (a := _typed(Answer, body)) is not None:
                        why = approvals.answer(a.id, a.hash, a.answer.strip())
                        if why is not None:
                            conn.error(why)
                            continue
                        claimed.discard(a.id)
                        conn.send("answered", Answered(a.id, a.answer).to_json(), True)
                    else:
                        conn.error(
                            "owner.sock takes pending, claim {id} or answer {id, hash, answer}"
                        )
            except (FrameError, OSError) as exc:
                with contextlib.suppress(OSError):
                    conn.error(str(exc))
            finally:
                for call_id in claimed:  # no default: a chat that closed says no
                    approvals.deny(call_id, "closed")


def _call_body(body: dict[str, object]) -> CallBody | None:
    """{tool, arguments} strings, with the session's id (a string) and its epoch (0 or more)."""
    return _typed(CallBody, body)


Body = TypeVar("Body", CallBody, Claim, Answer)


def _typed(cls: type[Body], body: dict[str, object]) -> Body | None:
    """The frame's body as `cls` (proto.broker), or None when it is not one."""
    try:
        return cls.from_json(body)
    except BodyError:
        return None


def run(
    config: BrokerConfig, log: DaemonLog, servers: dict[str, McpServerConfig] | None = None
) -> ExitStatus:
    loopd_uid = os.geteuid() if config.loopd_uid is None else config.loopd_uid
    owner_uid = os.geteuid() if config.owner_uid is None else config.owner_uid
    shell = config.section("shell", SandboxLimits)  # its write quota holds for rw servers too
    manager = _Mcp(servers or {}, config.workspace, log, shell.write_bytes)
    table = Table(BUILTIN, manager.families)
    state = state_path(config.socket)
    try:
        broker = Broker(config, table=table, warn=log.warn)
    except GrantsError as exc:  # the file the owner edits: its path, the line, what to do
        why = (
            f"{config.grants}: {exc}; fix it (conf/grants.toml.example shows every key), "
            "then restart brokerd (make run)"
        )
        log.warn(f"serve: cannot start: {why}")
        write_state(state, FAILED, error=why)
        manager.close()
        return ExitStatus.ERROR
    except (OSError, UnicodeDecodeError, LogError) as exc:  # say which, exit 1
        log.warn(f"serve: cannot start: {exc}")
        write_state(state, FAILED, error=str(exc))
        manager.close()
        return ExitStatus.ERROR
    server, chat = Server(broker, log), config.chat
    with stop_signals(STOP_SIGNALS) as stop:
        listeners: list[UnixListener] = []
        try:
            check_uids(chat, loopd_uid)  # loopd_uid may have been left to its default
            listeners.append(_bind(config.socket, loopd_uid, "[broker] socket"))
            listeners.append(_bind(config.owner_socket, owner_uid, "[broker] owner_socket"))
            if chat is not None:
                listeners.append(_bind(chat.socket, chat.gatewayd_uid, CHAT_SETTING))
        except SetupError as exc:
            for listener in listeners:
                listener.close()
            log.warn(f"serve: {exc}")
            write_state(state, FAILED, error=str(exc))
            broker.close()
            manager.close()
            return ExitStatus.ERROR
        served: list[Route] = [(loopd_uid, server.serve_loopd, "broker.sock"),
                               (owner_uid, server.serve_owner, "owner.sock")]  # fmt: skip
        served += [ChatDesk(broker.approvals, chat, log).route()] if chat is not None else []
        routes = {listener.sock: how for listener, how in zip(listeners, served, strict=True)}
        no = broker.state("shell", Sandbox).probe()
        log.listening(
            config.socket,
            f"owner socket {config.owner_socket}",
            f"loopd uid {loopd_uid}",
            f"owner uid {owner_uid}",
            banner(chat),
            f"workspace {config.workspace}",
            "openat2" if broker.ws.openat2 else "O_NOFOLLOW walk (no openat2)",
            f"shell off: {no}" if no else "shell: sandbox ready",
        )
        offered = [schema.name for schema in broker.tools()]
        write_state(state, READY, tools=offered, workspace=config.workspace,
                    shell=f"off: {no}" if no else "sandbox ready")  # fmt: skip
        try:
            with selectors.DefaultSelector() as sel:
                for s in routes:
                    sel.register(s, selectors.EVENT_READ)
                sel.register(stop.read_fd, selectors.EVENT_READ)
                while not stop.stopping:
                    for key, _ in sel.select():
                        if key.fileobj == stop.read_fd:
                            stop.drain()
                            continue
                        _accept(key.fileobj, routes, server, log)  # type: ignore[arg-type]
        finally:
            for listener in listeners:
                listener.close()
            manager.close()  # every server's process group killed: no sandbox process left
            broker.close()
            write_state(state, STOPPED)
            log.say("stopped")
    return ExitStatus.OK


class _Mcp:
    """The MCP servers (docs/mcp.md): each started at its first use, never here; stopped with
    brokerd. The MCP client (the `mcp` extra: most of brokerd's packages, a web stack among them)
    is imported only when `[mcp.*]` names a server (docs/decisions/mcp-extra.md)."""

    def __init__(
        self, servers: dict[str, McpServerConfig], workspace: str, log: DaemonLog, write_bytes: int
    ):
        self.close: Callable[[], None] = lambda: None
        self.families: list[Family] = []
        if servers:
            from boxmaker.brokerd.mcp.manager import McpManager
            from boxmaker.brokerd.mcp.rows import epoch_key, families

            manager = McpManager(servers, workspace, log.warn, write_bytes=write_bytes)
            self.close, self.families = manager.close, families(manager, epoch_key)


def _accept(listener: socket.socket, routes: dict, server: Server, log: DaemonLog) -> None:  # type: ignore[type-arg]
    uid, handler, name = routes[listener]
    while True:
        try:
            client, _ = listener.accept()
        except (BlockingIOError, ConnectionAbortedError):
            return
        client.setblocking(True)
        peer = _peer_uid(client)
        if peer != uid:
            client.close()
            log.say(f"refused a connection on {name}: peer uid {peer} is not uid {uid}")
            continue
        if not server.admit(name):
            _refuse(client, name, server.broker.config.max_connections)
            log.say(f"refused a connection on {name}: {name} has max_connections open")
            continue
        threading.Thread(target=_counted, args=(server, name, handler, client), daemon=True).start()


def _counted(server: Server, name: str, handler: Any, client: socket.socket) -> None:
    try:
        handler(client)
    finally:
        server.release(name)


def _refuse(client: socket.socket, name: str, limit: int) -> None:
    with client, contextlib.suppress(OSError):
        client.settimeout(1.0)  # a fresh socket's buffer takes the frame at once
        kinds = {"broker.sock": BROKER_KINDS, "chat.sock": CHAT_KINDS}.get(name, OWNER_KINDS)
        Conn(client, kinds).error(
            f"{name} has {limit} connections open, its bound ([broker] max_connections); "
            "close one or raise the bound"
        )
