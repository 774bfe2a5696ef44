"""The file operations the session store is built from: exact modes, fsynced folders, locks."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Protocol

from .errors import SessionError

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


def read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = os.fstat(fd).st_size
    while True:
        chunk = os.read(fd, max(size + 1, _READ_BYTES))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def read_maybe(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
