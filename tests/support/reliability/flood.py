"""A connection flood on a Unix socket, for the reliability tests: many connections held open at
once, each connected without blocking and retried while the listener's backlog is full (a full
Unix backlog answers EAGAIN at once), until all are in or the bound passes."""

from __future__ import annotations

import errno
import socket
import time


def flood(path: str, n: int, bound_s: float = 10.0) -> tuple[list[socket.socket], int]:
    """Up to n connections to `path`, held open: the connected sockets, and how many could not be
    made within `bound_s` (the listener refused or never took them). The caller closes them."""
    socks: list[socket.socket] = []
    deadline = time.monotonic() + bound_s
    while len(socks) < n and time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        code = s.connect_ex(path)
        if code == 0:
            socks.append(s)
            continue
        s.close()
        if code not in (errno.EAGAIN, errno.ECONNREFUSED):
            raise OSError(code, f"connect to {path} failed")
        time.sleep(0.002)  # the backlog is full: give the daemon a moment to accept (bounded)
    return socks, n - len(socks)


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()
