"""The socket's folder: created 0700 at every level, or an existing one that only we can change.

A Unix socket's file mode is one guard; the folder is the other: whoever can write to the folder
can replace the socket file with their own between our start and a client's connect. So a folder
we create is 0700 at each level we create (os.makedirs gives the intermediate levels 0777 & ~umask),
and an existing folder is refused, as OpenSSH's StrictModes refuses a home folder, when another user
owns it (root aside) or when its group or others may write to it.
"""

import os
import stat

from . import SetupError

FOLDER_MODE = 0o700


def _create_missing(folder: str) -> None:
    """Creates each missing level of `folder`, top down, each 0700 whatever the umask."""
    missing: list[str] = []
    level = folder
    while not os.path.lexists(level):
        missing.append(level)
        parent = os.path.dirname(level)
        if parent == level:
            break
        level = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            continue  # made by someone else meanwhile: checked below like any existing folder
        except OSError as exc:
            raise SetupError(f"cannot create the socket's folder {path}: {exc}") from exc
        os.chmod(path, FOLDER_MODE)  # mkdir's mode is filtered by the umask


def check_socket_folder(folder: str, own_uid: int | None = None) -> None:
    """Raises SetupError unless `folder` is a directory of ours or root's, writable by no other.

    Args:
        folder: the folder that holds (or will hold) the socket file.
        own_uid: the uid that may own it besides root; this process's effective uid by default.
    """
    uid = os.geteuid() if own_uid is None else own_uid
    try:
        st = os.stat(folder)
    except OSError as exc:
        raise SetupError(f"cannot use the socket's folder {folder}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise SetupError(f"the socket's folder {folder} exists and is not a directory")
    if st.st_uid not in (uid, 0):
        raise SetupError(
            f"the socket's folder {folder} is owned by uid {st.st_uid}, not by this user "
            f"(uid {uid}) or root; refusing to put a socket there"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SetupError(
            f"the socket's folder {folder} can be written by other users "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); refusing to put a socket there "
            f"(chmod go-w it, or choose another folder)"
        )


def prepare_socket_folder(folder: str, own_uid: int | None = None) -> None:
    """Creates `folder` if it is missing (0700 at every level), then checks it.

    Raises:
        SetupError: it cannot be created, or an existing folder is not safe (see the module).
    """
    _create_missing(os.path.abspath(folder))
    check_socket_folder(folder, own_uid)
