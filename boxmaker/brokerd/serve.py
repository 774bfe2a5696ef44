"""`brokerd serve --config <toml>`: broker.sock for loopd, owner.sock for the owner.

Both sockets are bound 0600 in a folder only brokerd can change (`_daemon.listener`). Each
accepted connection is checked with SO_PEERCRED against the ONE uid that socket serves (root
gets no exception): broker.sock only `loopd_uid`, owner.sock only `owner_uid`. When that uid is
not brokerd's own, the socket file is chowned to it (mode stays 0600), which needs CAP_CHOWN
(docs/operations.md). Every connection gets a thread; SIGTERM or SIGINT stops the accept loop.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import socket
import threading
from typing import TypeVar

from boxmaker._cli import ExitStatus
from boxmaker._daemon import SetupError
from boxmaker._daemon.listener import UnixListener, bind_unix_listener
from boxmaker._daemon.log import DaemonLog
from boxmaker._daemon.peer import peer_credentials
from boxmaker._daemon.signals import stop_signals
from boxmaker.brokerd.approvals import Held
from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.config import BrokerConfig
from boxmaker.brokerd.conn import Conn
from boxmaker.brokerd.grants import GrantsError
from boxmaker.brokerd.policy import LogError
from boxmaker.proto.broker import (
    BROKER_KINDS,
    OWNER_KINDS,
    Answer,
    Answered,
    ApprovalNeeded,
    CallBody,
    Claim,
)
from boxmaker.proto.errors import BodyError, FrameError

PROG = "brokerd"
WATCH_S = 0.25  # how often a held call looks at whether loopd is still there


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

    def serve_loopd(self, sock: socket.socket) -> None:
        conn = Conn(sock, BROKER_KINDS)
        with sock:
            try:
                while (frame := conn.recv()) is not None:
                    if frame.kind == "list":
                        tools = [s.to_json() for s in self.broker.tools()]
                        conn.send("tools", {"tools": tools}, True)
                    elif frame.kind == "call" and (b := _call_body(frame.body)) is not None:

                        def notify(held: Held, brief: str) -> None:
                            threading.Thread(
                                target=self._watch, args=(sock, held), daemon=True
                            ).start()
                            needed = ApprovalNeeded(held.id, held.call.tool, brief)
                            conn.send("approval_needed", needed.to_json(), False)

                        resp = self.broker.call(b.tool, b.arguments, notify, b.session, b.epoch)
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

    def _watch(self, sock: socket.socket, held: Held) -> None:
        """While a call waits for the owner: loopd closing its end (it gave up, or died) denies
        the call, so nothing runs for a caller that is gone."""
        while not held.done.is_set():
            try:
                readable, _, _ = select.select([sock], [], [], WATCH_S)
                if readable and sock.recv(1, socket.MSG_PEEK) == b"":
                    self.broker.approvals.deny(held.id, "cancelled: loopd closed the call")
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
                            conn.error(f"no call {c.id!r} is waiting for an answer")
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


def run(config: BrokerConfig, log: DaemonLog) -> ExitStatus:
    loopd_uid = os.geteuid() if config.loopd_uid is None else config.loopd_uid
    owner_uid = os.geteuid() if config.owner_uid is None else config.owner_uid
    try:
        broker = Broker(config)
    except (OSError, UnicodeDecodeError, GrantsError, LogError) as exc:  # say which, exit 1
        log.warn(f"serve: cannot start: {exc}")
        return ExitStatus.ERROR
    server = Server(broker, log)
    with stop_signals() as stop:
        try:
            tools = _bind(config.socket, loopd_uid, "[broker] socket")
            try:
                owner = _bind(config.owner_socket, owner_uid, "[broker] owner_socket")
            except SetupError:
                tools.close()
                raise
        except SetupError as exc:
            log.warn(f"serve: {exc}")
            broker.close()
            return ExitStatus.ERROR
        routes = {
            tools.sock: (loopd_uid, server.serve_loopd, "broker.sock"),
            owner.sock: (owner_uid, server.serve_owner, "owner.sock"),
        }
        log.listening(
            config.socket,
            f"owner socket {config.owner_socket}",
            f"loopd uid {loopd_uid}",
            f"owner uid {owner_uid}",
            f"workspace {config.workspace}",
            "openat2" if broker.ws.openat2 else "O_NOFOLLOW walk (no openat2)",
            f"shell off: {no}" if (no := broker.sandbox.probe()) else "shell: sandbox ready",
        )
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
                        _accept(key.fileobj, routes, log)  # type: ignore[arg-type]
        finally:
            tools.close()
            owner.close()
            broker.close()
            log.say("stopped")
    return ExitStatus.OK


def _accept(listener: socket.socket, routes: dict, log: DaemonLog) -> None:  # type: ignore[type-arg]
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
        threading.Thread(target=handler, args=(client,), daemon=True).start()
