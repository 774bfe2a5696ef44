"""What both daemons (inferproxy, `loopd serve`) share around their Unix socket.

- `folder.prepare_socket_folder`: the socket's folder, created 0700 at every level, or an existing
  one checked as OpenSSH's StrictModes does (ours or root's, writable by nobody else).
- `listener.bind_unix_listener`: a stale socket file replaced (only a socket nobody listens on),
  bound under a umask, 0600, listening; `UnixListener.close` removes only the file it bound.
- `peer.peer_refusal`: SO_PEERCRED on an accepted connection; any uid but ours and root is refused.
- `signals.stop_signals`: SIGTERM/SIGINT through a self-pipe, so a select() loop wakes on them.
- `accept.accept_until_stopped`: the accept loop over those, with the peer check on every
  connection and a back-off when accept() runs out of descriptors.
- `log.DaemonLog`: `<prog>: <line>` lines, the start banner, one line per refusal.

This module holds only what a sans-IO core may import too (loopd's config checks socket paths).
"""

# The kernel's limit on sun_path: 108 bytes, one of them the terminating NUL.
MAX_UNIX_SOCKET_PATH_BYTES = 107


class SetupError(Exception):
    """The daemon cannot start as asked; the message says what was wrong (one line)."""
