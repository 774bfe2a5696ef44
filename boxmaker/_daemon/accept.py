"""The accept loop both daemons run in their main thread, until SIGTERM or SIGINT.

It waits on the listener and the stop signals' self-pipe together, accepts every pending
connection, refuses a peer that is neither our uid nor root (one log line), and hands the others
to the daemon. A daemon with timers (inferproxy's idle check) passes `on_timer`, which the loop
calls before each wait and which says how long it may wait.
"""

import errno
import os
import select
import selectors
import socket
from collections.abc import Callable

from .log import DaemonLog
from .peer import peer_refusal
from .signals import StopSignals

RESOURCE_BACKOFF_SECONDS = 0.1  # pause after accept() ran out of fds or memory
# accept() errors that mean "out of a resource": back off instead of spinning on the backlog.
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

OnClient = Callable[[socket.socket], None]
OnTimer = Callable[[], float | None]


def accept_until_stopped(
    listener: socket.socket,
    stop: StopSignals,
    on_client: OnClient,
    log: DaemonLog,
    *,
    on_timer: OnTimer | None = None,
    also_uids: frozenset[int] = frozenset(),
) -> None:
    """Accepts connections until a stop signal; returns with the listener still open.

    Args:
        listener: a listening, non-blocking socket (`listener.bind_unix_listener`).
        stop: the stop signals' self-pipe (`signals.stop_signals`).
        on_client: takes each accepted connection whose peer passed the check; it owns the
            socket from then on (it closes it, or hands it to a thread that will).
        log: where refusals and accept failures go.
        on_timer: called before each wait; returns the seconds until it wants to be called again,
            or None for no timer. It runs in this thread, between accepts.
        also_uids: uids admitted besides this process's and root (loopd's `[channel] clients`).
    """
    own_uid = os.geteuid()
    with selectors.DefaultSelector() as sel:
        sel.register(listener, selectors.EVENT_READ, "accept")
        sel.register(stop.read_fd, selectors.EVENT_READ, "stop")
        while not stop.stopping:
            timeout = on_timer() if on_timer is not None else None
            for key, _ in sel.select(timeout):
                if key.data == "stop":
                    stop.drain()
                elif not _accept_pending(listener, stop, on_client, log, own_uid, also_uids):
                    # Out of fds or memory: the backlog stays readable, so wait on the stop
                    # signals alone for a moment to let connections close, then retry.
                    select.select([stop.read_fd], [], [], RESOURCE_BACKOFF_SECONDS)
                if stop.stopping:
                    return


def _accept_pending(
    listener: socket.socket,
    stop: StopSignals,
    on_client: OnClient,
    log: DaemonLog,
    own_uid: int,
    also_uids: frozenset[int] = frozenset(),
) -> bool:
    """Accepts every pending connection; False when a resource ran out."""
    while not stop.stopping:
        try:
            client, _ = listener.accept()
        except BlockingIOError:
            return True
        except ConnectionAbortedError:
            continue
        except OSError as exc:
            if exc.errno in _RESOURCE_ERRNOS:
                log.warn(f"accept failed: {exc}")
                return False
            raise
        refusal = peer_refusal(client, own_uid, also_uids)
        if refusal is not None:
            client.close()
            log.say(f"refused a connection: {refusal}")
            continue
        on_client(client)
    return True
