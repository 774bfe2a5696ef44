"""Opening paths beneath the workspace with the kernel's help, and atomic writes.

Every open starts from a descriptor of the workspace folder and goes through `openat2(2)` with
RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS: the kernel refuses `..` above the
start, an absolute path, every symlink (one to /etc, and one inside that would lead from a
granted folder to a denied one: grants are decided on the path as written), and
/proc/self/root-style magic links, at every step of the resolution, atomically. Python has no
os.openat2, so it is called by number through ctypes (437 on x86_64 and aarch64). Where openat2
is missing (Linux < 5.6), the fallback walks one component at a time with O_NOFOLLOW from the
workspace's descriptor, refusing every symlink too. docs/decisions/brokerd-workspace-paths.md
says why both hold against a concurrent rename.

What the resolution cannot see, the open file's fstat does: only regular files are read or
replaced (a FIFO or a device is refused; opens use O_NONBLOCK so a FIFO never blocks), and a file
with more than one hard link is refused (a hard link to a file outside the workspace looks like
any other file to openat2).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from boxmaker.session.errors import NotARegularFile
from boxmaker.session.files import read_regular

SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
# Grants are decided on the path as written, so the path opened must be that path: no symlink is
# followed, even one that stays inside (it could lead from a granted folder to a denied one).
# BENEATH and NO_MAGICLINKS stay as a second wall.
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS


class PathRefused(Exception):
    """The path cannot be used; the message says why, for the tool result."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, 0, RESOLVE)
    fd = _libc.syscall(
        SYS_OPENAT2,
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def _probe() -> bool:
    if SYS_OPENAT2 is None:
        return False
    try:
        os.close(_openat2(os.open("/", os.O_PATH | os.O_CLOEXEC), ".", os.O_PATH))
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter refuses it
            return False
    return True


HAVE_OPENAT2 = _probe()


def _walk(dir_fd: int, parts: tuple[str, ...], flags: int) -> int:
    """The fallback: one component at a time, no symlink followed anywhere."""
    cur = os.dup(dir_fd)
    try:
        for p in parts[:-1]:
            nxt = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
            os.close(cur)
            cur = nxt
        if not parts:
            return os.open(".", flags | os.O_CLOEXEC, dir_fd=cur)
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
    finally:
        os.close(cur)


_WHY = {
    errno.EXDEV: "it leads outside the workspace (a symlink out, or '..')",
    errno.ELOOP: "a symlink; brokerd follows none (one could lead past a grant or out)",
    errno.ENOENT: "no such file or folder",
    errno.ENOTDIR: "a part of it is not a folder",
    errno.EACCES: "permission denied",
    errno.ENAMETOOLONG: "the name is too long",
    errno.EISDIR: "it is a folder",
    errno.EAGAIN: "a rename raced the lookup of a '..' (refused; try again)",
}


def describe(exc: OSError, shown: str) -> str:
    return f"{shown}: {_WHY.get(exc.errno or 0, exc.strerror or str(exc))}"


class Workspace:
    """The workspace folder, held open by descriptor: every path starts from it."""

    def __init__(self, path: str, *, use_openat2: bool | None = None) -> None:
        self.path = path
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.openat2 = HAVE_OPENAT2 if use_openat2 is None else use_openat2

    def close(self) -> None:
        os.close(self.fd)

    def open(self, parts: tuple[str, ...], flags: int) -> int:
        """A descriptor for `parts` beneath the workspace; PathRefused with the reason."""
        shown = "/".join(parts) or "."
        try:
            if self.openat2:
                return _openat2(self.fd, shown, flags)
            return _walk(self.fd, parts, flags)
        except OSError as exc:
            raise PathRefused(describe(exc, shown)) from None

    @contextlib.contextmanager
    def opened(self, parts: tuple[str, ...], flags: int) -> Iterator[int]:
        fd = self.open(parts, flags)
        try:
            yield fd
        finally:
            os.close(fd)


def check_regular(st: os.stat_result, shown: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise PathRefused(f"{shown}: it is a folder (list_dir lists it)")
    if not stat.S_ISREG(st.st_mode):
        raise PathRefused(f"{shown}: not a regular file (a FIFO, socket or device); refused")
    if st.st_nlink > 1:
        raise PathRefused(
            f"{shown}: the file has {st.st_nlink} hard links; refused, since a hard link may "
            "lead outside the workspace"
        )


def read_window(
    ws: Workspace,
    parts: tuple[str, ...],
    offset: int,
    limit: int,
    max_file: int,
    key: str = "max_file_bytes",
) -> tuple[bytes, int]:
    """Up to `limit` bytes from `offset`, and the file's size. A file over `max_file` (the
    `[broker] key` it comes from, named in the refusal) is refused before a byte is read, so a
    10 GB sparse file costs one fstat."""
    shown = "/".join(parts)
    with ws.opened(parts, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY) as fd:
        st = os.fstat(fd)
        check_regular(st, shown)
        if st.st_size > max_file:
            raise PathRefused(
                f"{shown}: the file is {st.st_size} bytes, over the limit of {max_file} "
                f"([broker] {key}); refused"
            )
        return os.pread(fd, max(0, min(limit, st.st_size - offset)), offset), st.st_size


def list_entries(ws: Workspace, parts: tuple[str, ...]) -> list[str]:
    """The folder's names, sorted, folders with a trailing /."""
    with ws.opened(parts, os.O_RDONLY | os.O_DIRECTORY) as fd:
        names = sorted(os.listdir(fd))
        out = []
        for name in names:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile
            shown = _printable(name)
            out.append(shown + "/" if stat.S_ISDIR(st.st_mode) else shown)
        return out


def _printable(name: str) -> str:
    """A name as one line of valid UTF-8: bytes that are not UTF-8 become U+FFFD, and control
    characters (a newline in a name) their escape, so no name can forge a line of the listing."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _split(parts: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    if not parts:
        raise PathRefused(".: a file name is needed, not the workspace itself")
    return parts[:-1], parts[-1]


def existing_mode(ws: Workspace, parts: tuple[str, ...]) -> int | None:
    """The mode of the regular file at `parts`, None if there is none; refuses anything else."""
    try:
        fd = ws.open(parts, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except PathRefused as exc:
        if str(exc).endswith(_WHY[errno.ENOENT]):
            return None
        raise
    try:
        st = os.fstat(fd)
        check_regular(st, "/".join(parts))
        return stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def missing_folders(ws: Workspace, folder: tuple[str, ...]) -> int:
    """How many trailing components of `folder` do not exist (0: it is there)."""
    for have in range(len(folder), -1, -1):
        try:
            os.close(ws.open(folder[:have], os.O_PATH | os.O_DIRECTORY))
            return len(folder) - have
        except PathRefused as exc:
            if not str(exc).endswith(_WHY[errno.ENOENT]):
                raise
    return len(folder)


def make_folders(ws: Workspace, folder: tuple[str, ...]) -> None:
    """Creates the missing folders of `folder`, each with mkdirat in its parent's descriptor
    (resolved beneath like every open), so a race can only make a folder inside."""
    for at in range(len(folder) - missing_folders(ws, folder), len(folder)):
        # FileExistsError: made meanwhile; the next open checks what it is.
        parent_open = ws.opened(folder[:at], os.O_PATH | os.O_DIRECTORY)
        with parent_open as parent, contextlib.suppress(FileExistsError):
            os.mkdir(folder[at], 0o755, dir_fd=parent)


TEMP_NAME_BYTES = 200  # of the file's name in its temp file's: 1 + 200 + 1 + 12 + 4 <= NAME_MAX
SET_ID_BITS = stat.S_ISUID | stat.S_ISGID


def temp_name(name: str) -> str:
    """The temp file's name for `name`: cut in bytes (NAME_MAX counts bytes), at a character's
    end, so a 255-byte name of 4-byte characters still has a temp name the kernel takes."""
    head, size = [], 0
    for char in name:
        size += len(os.fsencode(char))
        if size > TEMP_NAME_BYTES:
            break
        head.append(char)
    return f".{''.join(head)}.{secrets.token_hex(6)}.tmp"


def write_atomic(ws: Workspace, parts: tuple[str, ...], data: bytes) -> None:
    """Replaces (or creates) the file, and its missing folders: a temp file in the same folder,
    fsync, renameat, fsync of the folder. A reader sees the old file or the new one, never a
    part. The old file's permission bits are kept, never its set-uid or set-gid bit (one planted
    by the sandbox would become brokerd's, root's when brokerd is root)."""
    folder, name = _split(parts)
    make_folders(ws, folder)
    mode = existing_mode(ws, parts)
    with ws.opened(folder, os.O_RDONLY | os.O_DIRECTORY) as dfd:
        tmp = temp_name(name)
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dfd,
        )
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, 0o644 if mode is None else mode & 0o777)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        os.fsync(dfd)


MAX_GRANTS_BYTES = 1 << 20


class TrustedFileError(OSError):
    """A file brokerd trusts (the grants) is missing, a link, not regular or over its bound."""


def read_grants(path: str) -> bytes:
    """The grants file, read by the home-file rules: no final symlink, a regular file (a FIFO
    never blocks), at most MAX_GRANTS_BYTES. The message names the file and what to do."""
    try:
        data = read_regular(Path(path), MAX_GRANTS_BYTES)
    except NotARegularFile as exc:
        raise TrustedFileError(f"[broker] grants: {exc}") from None
    if data is None:
        raise TrustedFileError(
            f"[broker] grants: {path}: no such file (write one: docs/brokerd.md)"
        )
    return data


def closed_folder(path: Path, uid: int, gid: int) -> str | None:
    """The first folder from `/` down to `path` that `uid` may not pass through (no x bit for
    it), as `<folder> is mode 0700, owner 0`; None when every one lets it through."""
    for folder in [*reversed(path.parents), path]:
        try:
            st = folder.stat()
        except OSError:
            return None  # bwrap will say what is wrong with it
        bit = (
            stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH
        )
        if not st.st_mode & bit:
            return f"{folder} is mode {stat.S_IMODE(st.st_mode):04o}, owner {st.st_uid}"
    return None
