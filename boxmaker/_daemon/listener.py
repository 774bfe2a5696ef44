"""The listening Unix socket: a stale file replaced, bound 0600, removed on the way out.

Only a socket file that nobody listens on is ever removed: anything else at the path (a regular
file, a folder, a symbolic link) is refused and left as it is, and a socket someone listens on is
another daemon's, never taken over.
"""

import contextlib
import os
import socket
import stat
from dataclasses import dataclass

from . import MAX_UNIX_SOCKET_PATH_BYTES, SetupError
from .folder import prepare_socket_folder

SOCKET_MODE = 0o600
DEFAULT_BACKLOG = 64
PROBE_TIMEOUT_SECONDS = 1.0  # a connect to a listening socket answers at once, even when busy


def _describe_kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a socket"


def remove_stale_socket(path: str, setting: str = "--listen") -> None:
    """Removes a socket file nobody listens on at `path`; refuses anything else there.

    Args:
        path: the socket path.
        setting: how the daemon's user names the path (a flag or a config key), for messages.

    Raises:
        SetupError: `path` is not a socket, or a process listens on it.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SetupError(
            f"{path} exists and is {_describe_kind(st.st_mode)}, not a socket; "
            f"refusing to remove it (move it away or choose another {setting} path)"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(PROBE_TIMEOUT_SECONDS)
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


@dataclass
class UnixListener:
    """A bound, listening, non-blocking Unix socket and the inode of the file it made."""

    sock: socket.socket
    path: str
    inode: int

    def close(self) -> None:
        """Closes the socket and unlinks its file, unless a successor has replaced the file."""
        self.sock.close()
        with contextlib.suppress(OSError):
            if os.lstat(self.path).st_ino == self.inode:
                os.unlink(self.path)


def bind_unix_listener(
    path: str, *, backlog: int = DEFAULT_BACKLOG, setting: str = "--listen"
) -> UnixListener:
    """A listening Unix socket at `path`, mode 0600, in a folder only we can change.

    Checks the path's length, prepares the folder (`folder.prepare_socket_folder`), removes a
    stale socket file, then binds with a umask that keeps the file from ever being wider than 0600.

    Args:
        path: where the socket file goes.
        backlog: listen(2)'s queue.
        setting: how the daemon's user names the path (a flag or a config key), for messages.

    Raises:
        SetupError: with one line that says what was wrong.
    """
    size = len(os.fsencode(path))
    if size > MAX_UNIX_SOCKET_PATH_BYTES:
        raise SetupError(
            f"{setting} path is {size} bytes; a Unix socket path may have at "
            f"most {MAX_UNIX_SOCKET_PATH_BYTES}: {path}"
        )
    prepare_socket_folder(os.path.dirname(os.path.abspath(path)))
    remove_stale_socket(path, setting)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # bind() creates the file with 0777 & ~umask: bind under 0177 so it is never wider than 0600.
    old_umask = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise SetupError(f"cannot bind {path}: {exc}") from exc
    finally:
        os.umask(old_umask)
    try:
        inode = os.lstat(path).st_ino
        os.chmod(path, SOCKET_MODE)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise SetupError(f"cannot listen on {path}: {exc}") from exc
    return UnixListener(sock, path, inode)
