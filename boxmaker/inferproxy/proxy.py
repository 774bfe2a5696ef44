"""The `inferproxy` shell: a Unix socket in front of one TCP upstream, bytes only.

The main thread runs the daemon shell's accept loop (`boxmaker._daemon`: the listener, the peer
check, SIGTERM/SIGINT through a self-pipe) and owns the admission limits (`limits.py`). Each
admitted connection gets a thread that connects upstream and then copies client -> upstream, and a
second thread that copies upstream -> client. The copying is `boxmaker._fast.splice.pump`, which
releases the GIL; nothing here looks at the bytes.
"""

import contextlib
import math
import select
import socket
import threading
import time
from dataclasses import dataclass

from boxmaker._daemon.accept import accept_until_stopped
from boxmaker._daemon.listener import bind_unix_listener
from boxmaker._daemon.log import DaemonLog
from boxmaker._daemon.signals import stop_signals
from boxmaker._fast import IMPLEMENTATIONS
from boxmaker._fast.splice import METHOD, pump

from .idle import tcp_quiet_ms
from .limits import (
    DEFAULT_ACCEPT_BURST,
    DEFAULT_ACCEPT_RATE,
    DEFAULT_MAX_CONNECTIONS,
    AcceptLimits,
)

DEFAULT_CONNECT_TIMEOUT = 3.0  # seconds; a dead upstream closes the client this fast
# loopd sends its request as soon as it has connected: a client that has said nothing by then
# never will, and must not keep one of the few connections.
DEFAULT_FIRST_BYTE_TIMEOUT = 5.0
# Longer than the longest silence of a working loopd: it waits for the first token of an answer
# for at most busy_wait_ms + load_wait_ms (600 + 180 s by default), asking /slots on another
# connection meanwhile; 2 minutes more for its polls and a slow start.
DEFAULT_IDLE_TIMEOUT = 900.0
# A Unix socket holds only its sender's SO_SNDBUF (212 KiB by default) in flight, so the
# upstream -> client copy stalls on every ~200 KiB; 1 MiB (the kernel doubles it) lets a
# splice move more per call and keeps both sides busy. Measured by bench/proxy.py.
CLIENT_SNDBUF = 1 << 20
BACKLOG = 64  # over-limit clients are accepted and closed, so the queue only absorbs bursts
STOP_JOIN_SECONDS = 2.0  # how long SIGTERM waits for copy threads after cutting their sockets


@dataclass(frozen=True)
class Settings:
    listen: str
    upstream_host: str
    upstream_port: int
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    accept_burst: int = DEFAULT_ACCEPT_BURST
    accept_rate: float = DEFAULT_ACCEPT_RATE
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT

    @property
    def upstream(self) -> str:
        host = self.upstream_host
        return f"[{host}]:{self.upstream_port}" if ":" in host else f"{host}:{self.upstream_port}"


# --- One proxied connection ----------------------------------------------------------------------


def _shutdown(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):  # already shut, reset, or never connected
        sock.shutdown(how)


class Connection:
    """One client and its upstream socket, copied both ways on two threads.

    Sockets are only closed once both copy threads are done: closing an fd while another thread
    is blocked on it is racy (the number can be reused), so a failure or a stop shuts both sockets
    down, which wakes the other thread, and the last thread out closes them.
    """

    def __init__(self, proxy: "Proxy", client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.accepted_at = time.monotonic()  # the first-byte timeout counts from here
        self.upstream: socket.socket | None = None
        self._lock = threading.Lock()
        self._running = 1  # the connecting thread; becomes 2 once both copies run
        self._aborted = False
        self._closed = False
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        """Starts the connecting thread; RuntimeError if no thread can be had."""
        thread = threading.Thread(target=self._run, name="inferproxy-up", daemon=True)
        self.threads.append(thread)
        self.proxy.track(self)
        thread.start()

    def abort(self) -> None:
        """Cuts both directions; the copy threads then finish and close the sockets."""
        with self._lock:
            self._aborted = True
            if self._closed:
                return
            _shutdown(self.client, socket.SHUT_RDWR)
            if self.upstream is not None:
                _shutdown(self.upstream, socket.SHUT_RDWR)

    def _connect(self) -> socket.socket:
        settings = self.proxy.settings
        upstream = socket.create_connection(
            (settings.upstream_host, settings.upstream_port), timeout=settings.connect_timeout
        )
        try:
            upstream.settimeout(None)  # pump needs blocking fds; a timeout makes them non-blocking
            # A request may reach us in two pieces: send each at once, not after an ACK (Nagle).
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            upstream.close()
            raise
        return upstream

    def _run(self) -> None:
        try:
            upstream = self._connect()
        except OSError:
            self._finish()  # refused, unreachable or timed out: the client is closed at once
            return
        with self._lock:
            self.upstream = upstream
            if self._aborted:
                _shutdown(upstream, socket.SHUT_RDWR)
            self._running = 2
        down = threading.Thread(
            target=self._copy, args=(upstream, self.client), name="inferproxy-down", daemon=True
        )
        self.threads.append(down)
        try:
            down.start()
        except RuntimeError:  # no thread to be had: give up on this connection
            with self._lock:
                self._running = 1
            self.abort()
            self._finish()
            return
        if not self._first_byte_arrives():
            timeout = self.proxy.settings.first_byte_timeout
            self.proxy.log.say(
                f"closed an idle connection: no byte from the client in {timeout:g} s "
                f"(--first-byte-timeout {timeout:g})"
            )
            self.abort()
            self._finish()
            return
        self._copy(self.client, upstream)

    def _first_byte_arrives(self) -> bool:
        """Waits for the client's first byte (or its EOF, or an abort); False at the timeout.

        One poll() per connection, before the copy starts: the copy loop itself is unchanged.
        """
        deadline = self.accepted_at + self.proxy.settings.first_byte_timeout
        poller = select.poll()
        poller.register(self.client.fileno(), select.POLLIN)
        return bool(poller.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000))))

    def quiet_ms(self) -> int | None:
        """How long the connection has carried no byte either way; None while that cannot be
        told (still connecting upstream) or no longer matters (cut, or closed)."""
        with self._lock:  # the fd stays ours while we ask: the last thread out closes it
            if self._aborted or self._closed or self.upstream is None:
                return None
            try:
                return tcp_quiet_ms(self.upstream)
            except OSError:
                return None

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            pump(src.fileno(), dst.fileno())
        except OSError:
            self.abort()  # either side failed: close both
        else:
            _shutdown(dst, socket.SHUT_WR)  # pass the half-close on; the other way keeps going
        self._finish()

    def _finish(self) -> None:
        with self._lock:
            self._running -= 1
            if self._running > 0:
                return
            self._closed = True
            self.client.close()
            if self.upstream is not None:
                self.upstream.close()
        self.proxy.forget(self)


# --- The accept loop -----------------------------------------------------------------------------


class Proxy:
    def __init__(self, settings: Settings, log: DaemonLog) -> None:
        self.settings = settings
        self.log = log
        self.limits = AcceptLimits(
            settings.max_connections, settings.accept_burst, settings.accept_rate
        )
        self._lock = threading.Lock()  # guards limits and the tables below, across threads
        self._connections: set[Connection] = set()
        self._idle_check_at: float | None = None  # main thread only

    def track(self, conn: Connection) -> None:
        with self._lock:
            self._connections.add(conn)

    def forget(self, conn: Connection) -> None:
        """`conn` has ended (or never started): its slot under the connection cap is free."""
        with self._lock:
            self._connections.discard(conn)
            self.limits.release()

    def serve(self) -> None:
        """Binds, accepts until SIGTERM or SIGINT, then cleans up.

        Must run in the main thread (it installs the signal handlers, and restores them after).

        Raises:
            SetupError: the socket cannot be bound (nothing was started).
        """
        # Handlers first: a SIGTERM from here on, even during bind, still removes the socket.
        with stop_signals() as stop:
            listener = bind_unix_listener(self.settings.listen, backlog=BACKLOG)
            try:
                self.log.listening(
                    self.settings.listen,
                    f"upstream {self.settings.upstream}",
                    f"splice={IMPLEMENTATIONS.get('splice', '?')} ({METHOD})",
                )
                accept_until_stopped(
                    listener.sock, stop, self._admit, self.log, on_timer=self._close_idle
                )
            finally:
                listener.close()
                self._stop_connections()

    def _admit(self, client: socket.socket) -> None:
        with self._lock:
            refusal = self.limits.admit(time.monotonic())
        if refusal is not None:
            client.close()
            self.log.say(f"refused a connection: {self.limits.describe(refusal)}")
            return
        client.setblocking(True)
        with contextlib.suppress(OSError):  # capped by net.core.wmem_max; the default still works
            client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SNDBUF)
        conn = Connection(self, client)
        try:
            conn.start()
        except RuntimeError:  # could not start a thread
            client.close()
            self.forget(conn)
            return
        due = time.monotonic() + self.settings.idle_timeout
        if self._idle_check_at is None or due < self._idle_check_at:
            self._idle_check_at = due

    def _close_idle(self) -> float | None:
        """Cuts every connection quiet for the idle timeout; the seconds until the next check.

        The accept loop calls it before each wait. It asks the kernel only once a deadline may
        have passed, and then schedules the next check for the earliest one still to come.
        """
        if self._idle_check_at is None:
            return None
        now = time.monotonic()
        if now < self._idle_check_at:
            return self._idle_check_at - now
        limit_ms = math.ceil(self.settings.idle_timeout * 1000)
        with self._lock:
            conns = list(self._connections)
        wait: float | None = None
        for conn in conns:
            quiet_ms = conn.quiet_ms()
            if quiet_ms is None:
                # Still connecting (or already ending): look again a whole timeout from now.
                left = self.settings.idle_timeout
            elif quiet_ms >= limit_ms:
                timeout = self.settings.idle_timeout
                self.log.say(
                    f"closed an idle connection: no byte either way in {timeout:g} s "
                    f"(--idle-timeout {timeout:g})"
                )
                conn.abort()
                continue
            else:
                left = (limit_ms - quiet_ms) / 1000
            wait = left if wait is None else min(wait, left)
        self._idle_check_at = None if wait is None else now + wait
        return wait

    def _stop_connections(self) -> None:
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            conn.abort()
        deadline = time.monotonic() + STOP_JOIN_SECONDS
        for conn in conns:
            if conn.upstream is None:
                # Still connecting upstream: its client is already shut down, and the thread is
                # a daemon thread, which ends with the process. Waiting would only add the
                # connect timeout to the stop.
                continue
            for thread in list(conn.threads):
                if thread.ident is not None:  # started
                    thread.join(max(0.0, deadline - time.monotonic()))
