"""The `inferproxy` shell: a Unix socket in front of one TCP upstream, bytes only.

The main thread owns the listener and the admission limits (`limits.py`); it waits on the
listener and on a signal wake-up fd together, so SIGTERM/SIGINT are handled between accepts and
never in the middle of one. Each admitted connection gets a thread that connects upstream and then
copies client -> upstream, and a second thread that copies upstream -> client. The copying is
`boxmaker._fast.splice.pump`, which releases the GIL; nothing here looks at the bytes.
"""

import contextlib
import errno
import os
import select
import selectors
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TextIO

from boxmaker._fast import IMPLEMENTATIONS
from boxmaker._fast.splice import METHOD, pump

from .limits import (
    DEFAULT_ACCEPT_BURST,
    DEFAULT_ACCEPT_RATE,
    DEFAULT_MAX_CONNECTIONS,
    AcceptLimits,
)

DEFAULT_CONNECT_TIMEOUT = 3.0  # seconds; a dead upstream closes the client this fast
# A Unix socket holds only its sender's SO_SNDBUF (212 KiB by default) in flight, so the
# upstream -> client copy stalls on every ~200 KiB; 1 MiB (the kernel doubles it) lets a
# splice move more per call and keeps both sides busy. Measured by bench/proxy.py.
CLIENT_SNDBUF = 1 << 20
BACKLOG = 64  # over-limit clients are accepted and closed, so the queue only absorbs bursts
RESOURCE_BACKOFF_SECONDS = 0.1  # pause after accept() ran out of fds or memory
STOP_JOIN_SECONDS = 2.0  # how long SIGTERM waits for copy threads after cutting their sockets
SOCKET_MODE = 0o600
FOLDER_MODE = 0o700
# Kernel limit on sun_path (108 bytes, one of them the terminating NUL).
MAX_UNIX_PATH_BYTES = 107
# accept() errors that mean "out of a resource": back off instead of spinning on the backlog.
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class SetupError(Exception):
    """The proxy cannot start as asked; the message says what was wrong."""


@dataclass(frozen=True)
class Settings:
    listen: str
    upstream_host: str
    upstream_port: int
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    accept_burst: int = DEFAULT_ACCEPT_BURST
    accept_rate: float = DEFAULT_ACCEPT_RATE
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    @property
    def upstream(self) -> str:
        host = self.upstream_host
        return f"[{host}]:{self.upstream_port}" if ":" in host else f"{host}:{self.upstream_port}"


# --- The listening socket ------------------------------------------------------------------------


def _describe_kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a socket"


def _clear_stale_socket(path: str) -> None:
    """Removes a socket file nobody listens on; refuses anything else at `path`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SetupError(
            f"{path} exists and is {_describe_kind(st.st_mode)}, not a socket; "
            "refusing to remove it (move it away or choose another --listen path)"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        pass  # stale: left behind by a process that died
    except OSError as exc:
        raise SetupError(f"cannot tell whether the socket {path} is in use: {exc}") from exc
    else:
        raise SetupError(f"another process is listening on {path}; refusing to take it over")
    finally:
        probe.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _make_folder(folder: str) -> None:
    if os.path.isdir(folder):
        return
    try:
        os.makedirs(folder, mode=FOLDER_MODE)
    except FileExistsError:
        if not os.path.isdir(folder):
            raise SetupError(
                f"the socket's folder {folder} exists and is not a directory"
            ) from None
        return
    except OSError as exc:
        raise SetupError(f"cannot create the socket's folder {folder}: {exc}") from exc
    os.chmod(folder, FOLDER_MODE)  # makedirs' mode is filtered by the umask


def bind_listener(path: str) -> tuple[socket.socket, int]:
    """A listening Unix socket at `path` with mode 0600, and the inode of its file."""
    if len(os.fsencode(path)) > MAX_UNIX_PATH_BYTES:
        raise SetupError(
            f"--listen path is {len(os.fsencode(path))} bytes; a Unix socket path may have at "
            f"most {MAX_UNIX_PATH_BYTES}: {path}"
        )
    _make_folder(os.path.dirname(os.path.abspath(path)))
    _clear_stale_socket(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # bind() creates the file with 0777 & ~umask: bind under 0177 so it is never wider than 0600.
    old_umask = os.umask(0o177)
    try:
        listener.bind(path)
    except OSError as exc:
        listener.close()
        raise SetupError(f"cannot bind {path}: {exc}") from exc
    finally:
        os.umask(old_umask)
    try:
        inode = os.lstat(path).st_ino
        os.chmod(path, SOCKET_MODE)
        listener.listen(BACKLOG)
        listener.setblocking(False)
    except OSError as exc:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise SetupError(f"cannot listen on {path}: {exc}") from exc
    return listener, inode


def _remove_own_socket(path: str, inode: int) -> None:
    """Unlinks `path` only if it is still the file we bound (a successor may have replaced it)."""
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == inode:
            os.unlink(path)


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
        self._copy(self.client, upstream)

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
    def __init__(self, settings: Settings, out: TextIO = sys.stdout) -> None:
        self.settings = settings
        self.out = out
        self.limits = AcceptLimits(
            settings.max_connections, settings.accept_burst, settings.accept_rate
        )
        self._lock = threading.Lock()  # guards limits and the tables below, across threads
        self._connections: set[Connection] = set()

    def track(self, conn: Connection) -> None:
        with self._lock:
            self._connections.add(conn)

    def forget(self, conn: Connection) -> None:
        """`conn` has ended (or never started): its slot under the connection cap is free."""
        with self._lock:
            self._connections.discard(conn)
            self.limits.release()

    def _say(self, line: str) -> None:
        # A closed stdout must not take the proxy down with it: the line is lost, nothing else.
        with contextlib.suppress(OSError, ValueError):
            print(f"inferproxy: {line}", file=self.out, flush=True)

    def serve(self) -> int:
        """Binds, accepts until SIGTERM or SIGINT, then cleans up. Returns the exit code.

        Must run in the main thread (it installs the signal handlers, and restores them after).
        """
        # Handlers first: a SIGTERM from here on, even during bind, still removes the socket.
        with _signal_wakeup() as wake_fd:
            listener, inode = bind_listener(self.settings.listen)
            try:
                self._say(
                    f"listening on {self.settings.listen}, upstream {self.settings.upstream}, "
                    f"splice={IMPLEMENTATIONS.get('splice', '?')} ({METHOD})"
                )
                self._accept_until_stopped(listener, wake_fd)
            finally:
                listener.close()
                _remove_own_socket(self.settings.listen, inode)
                self._stop_connections()
        return 0

    def _accept_until_stopped(self, listener: socket.socket, wake_fd: "_Wakeup") -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(listener, selectors.EVENT_READ, "accept")
            sel.register(wake_fd.read_fd, selectors.EVENT_READ, "wake")
            while not wake_fd.stopping:
                for key, _ in sel.select():
                    if key.data == "wake":
                        wake_fd.drain()
                    elif not self._accept_ready(listener, wake_fd):
                        # Out of fds or memory: the backlog stays readable, so wait on the
                        # wake-up fd alone for a moment to let connections close, then retry.
                        select.select([wake_fd.read_fd], [], [], RESOURCE_BACKOFF_SECONDS)
                    if wake_fd.stopping:
                        return

    def _accept_ready(self, listener: socket.socket, wake_fd: "_Wakeup") -> bool:
        """Accepts every pending connection; False when a resource ran out."""
        while not wake_fd.stopping:
            try:
                client, _ = listener.accept()
            except BlockingIOError:
                return True
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRNOS:
                    print(f"inferproxy: accept failed: {exc}", file=sys.stderr, flush=True)
                    return False
                raise
            self._admit(client)
        return True

    def _admit(self, client: socket.socket) -> None:
        with self._lock:
            refusal = self.limits.admit(time.monotonic())
        if refusal is not None:
            client.close()
            self._say(f"refused a connection: {self.limits.describe(refusal)}")
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


class _Wakeup:
    """A self-pipe that SIGTERM/SIGINT write to, so the accept loop's select() wakes up."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.stopping = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.read_fd, 512):
                pass

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


@contextlib.contextmanager
def _signal_wakeup() -> Iterator[_Wakeup]:
    wake = _Wakeup()
    old_fd = signal.set_wakeup_fd(wake.write_fd, warn_on_full_buffer=False)
    old = {s: signal.signal(s, wake.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield wake
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(old_fd)
        wake.close()
