"""Who is at the other end of an accepted Unix connection (SO_PEERCRED), and may they stay.

The socket file's mode (0600) is the first guard, but anyone who can chmod it, or a folder set up
wrong, opens it to every user. So each accepted connection is checked too: only our own uid and
root get through. The kernel records the credentials at connect(), so they cannot be faked.
"""

import os
import socket
import struct
from dataclasses import dataclass

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class PeerCredentials:
    pid: int
    uid: int
    gid: int


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    """The peer's pid, uid and gid as of its connect(); OSError if they cannot be had."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid, uid, gid)


def peer_refusal(
    sock: socket.socket, own_uid: int | None = None, also: frozenset[int] = frozenset()
) -> str | None:
    """None when the peer is our own uid or root, else why it is refused (for the log line).

    Args:
        sock: an accepted AF_UNIX stream socket.
        own_uid: the uid allowed besides root; this process's effective uid by default.
        also: other uids the daemon's config admits (loopd's `[channel] clients`).
    """
    uid = os.geteuid() if own_uid is None else own_uid
    try:
        peer = peer_credentials(sock)
    except OSError as exc:
        return f"cannot read the peer's credentials: {exc}"
    if peer.uid in (uid, 0) or peer.uid in also:
        return None
    return (
        f"peer uid {peer.uid} (pid {peer.pid}) is neither this daemon's user (uid {uid}) nor root"
    )
