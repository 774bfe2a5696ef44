"""The file operations the session store is built from: exact modes, fsynced folders, locks."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import Protocol

from .errors import NotARegularFile, SessionError

DIR_MODE = 0o700
FILE_MODE = 0o600
_READ_BYTES = 1 << 20


class FileOps(Protocol):
    """The calls an append makes: `os` itself, or a test's stand-in that fails at one step."""

    def write(self, fd: int, data: bytes, /) -> int: ...

    def fsync(self, fd: int, /) -> None: ...

    def ftruncate(self, fd: int, length: int, /) -> None: ...


def errno_name(e: OSError) -> str:
    """`ENOSPC (No space left on device)`, or what there is of it."""
    name = errno.errorcode.get(e.errno or 0, f"errno {e.errno}")
    return f"{name} ({e.strerror})" if e.strerror else name


def ensure_dir(path: Path) -> None:
    """Makes `path` and any missing parents, 0700, fsyncing each parent that gained a folder."""
    if path.is_dir():
        return
    ensure_dir(path.parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return  # made by someone else meanwhile
    except OSError as e:
        raise SessionError(f"{path}: cannot create the folder: {e.strerror}") from e
    os.chmod(path, DIR_MODE)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_file(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
    fd = os.open(path, flags, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: Path, flags: int = os.O_RDONLY, *, follow: bool = False) -> int:
    """Opens `path` as a regular file without following a final symlink or blocking on a FIFO.

    Raises FileNotFoundError when it is missing, NotARegularFile when it is a link, a FIFO, a
    device or a folder (O_NONBLOCK means a FIFO with no writer cannot hang the open). `follow`
    lets a final symlink through (a file named by the config, outside the home), still checked.
    """
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | nofollow | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotARegularFile(
                f"{path}: is a symbolic link; files under the home are never followed out of it "
                "(replace the link with the file itself)"
            ) from e
        if e.errno == errno.EISDIR:
            raise NotARegularFile(f"{path}: is a folder, not a file (move it away)") from e
        if isinstance(e, FileNotFoundError):
            raise
        raise SessionError(f"{path}: cannot open: {errno_name(e)}") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotARegularFile(f"{path}: is {_kind(mode)}, not a regular file (move it away)")
    os.set_blocking(fd, True)
    return fd


def read_bounded(fd: int, limit: int, name: str) -> bytes:
    """The whole file behind `fd`, refused with NotARegularFile once it passes `limit` bytes."""
    if os.fstat(fd).st_size > limit:
        raise NotARegularFile(f"{name}: is over its bound of {limit:,} bytes; nothing was read")
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(_READ_BYTES, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:  # it grew while read
            raise NotARegularFile(f"{name}: is over its bound of {limit:,} bytes; nothing was read")


def read_regular(path: Path, limit: int, *, follow: bool = False) -> bytes | None:
    """A home file's bytes: None when missing; NotARegularFile for a link, special file or one
    over `limit` bytes. The one way loopd, brokerd and bxctl read a file under the home."""
    try:
        fd = open_regular(path, follow=follow)
    except FileNotFoundError:
        return None
    try:
        return read_bounded(fd, limit, str(path))
    finally:
        os.close(fd)
