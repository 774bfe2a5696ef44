"""The walk of everything beneath the workspace, no symlink followed: what a call added
(`tree_bytes`, for the write quota of shell and of `rw` MCP servers) and the set-id bits
cleared after one (`clear_set_id`).

It never skips a folder silently (issue 37 item 7): one descriptor per level, never sibling
folders open at once, so a wide workspace cannot exhaust RLIMIT_NOFILE; a folder it cannot
open is made enterable (u+rwx: it is the workspace, brokerd's to fix); one it still cannot
enter is named in WalkFailed, raised after the walk did what it could.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Generator, Iterator

from boxmaker.brokerd.paths import SET_ID_BITS

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SHOWN_FAILED = 5  # folders named in a WalkFailed message; the count says the rest


class WalkFailed(OSError):
    """A folder under the workspace could be neither entered nor made enterable: what is in it
    was not counted or cleared. The message names the folders."""


def _tree(top: str, failed: list[str]) -> Iterator[tuple[int, str, os.stat_result]]:
    """Every entry beneath the folder `top`, as (its folder's descriptor, name, lstat), no
    symlink followed: each folder is opened O_NOFOLLOW from its parent's descriptor.

    Depth first, one descriptor per level (a folder's sub-folders are opened one at a time,
    after its listing is read whole), so a wide workspace cannot exhaust RLIMIT_NOFILE. A folder
    whose open is refused is made enterable (u+rwx: it is the workspace, brokerd's to fix) and
    opened again; one that still cannot be entered is appended to `failed`, never skipped
    silently."""
    stack: list[tuple[int, str, list[str]]] = []
    try:
        fd = os.open(top, _DIR_FLAGS)
        stack.append((fd, "", []))
        stack[-1][2].extend((yield from _listed(fd, "./", failed)))
        while stack:
            dfd, rel, subs = stack[-1]
            if not subs:
                os.close(dfd)
                stack.pop()
                continue
            name = subs.pop()
            shown = f"{rel}{name}/"
            child = _enter(dfd, name, shown, failed)
            if child is not None:
                stack.append((child, shown, []))
                stack[-1][2].extend((yield from _listed(child, shown, failed)))
    finally:
        for dfd, _, _ in stack:
            os.close(dfd)


def _listed(
    dfd: int, shown: str, failed: list[str]
) -> Generator[tuple[int, str, os.stat_result], None, list[str]]:
    """The folder's entries (the listing read whole before any is given), then returns the
    names of its sub-folders. A listing that fails is noted in `failed`."""
    listed = []
    try:
        with os.scandir(dfd) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                    listed.append((entry.name, entry.stat(follow_symlinks=False)))
    except OSError as exc:
        failed.append(f"{shown}: {exc.strerror or exc}")
        return []
    subs = []
    for name, st in listed:
        if stat.S_ISDIR(st.st_mode):
            subs.append(name)
        yield dfd, name, st
    subs.reverse()  # popped from the end: walked in listing order
    return subs


def _enter(dfd: int, name: str, shown: str, failed: list[str]) -> int | None:
    """The sub-folder's descriptor; None when it is gone, or (noted in `failed`) when it can
    be neither opened nor made enterable."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except (FileNotFoundError, NotADirectoryError):
        return None  # removed, or replaced by a file the listing did not see: not a folder now
    except PermissionError:
        pass
    except OSError as exc:
        failed.append(f"{shown}: {exc.strerror or exc}")
        return None
    try:
        _make_enterable(dfd, name)
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except OSError as exc:
        failed.append(f"{shown}: {exc.strerror or exc} (and it cannot be made enterable)")
        return None


def _make_enterable(dfd: int, name: str) -> None:
    """u+rwx on the folder `name`, through its own O_PATH descriptor (never a path again)."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        os.chmod(f"/proc/self/fd/{fd}", mode | stat.S_IRWXU)
    finally:
        os.close(fd)


def _failed(top: str, failed: list[str]) -> WalkFailed:
    named = "; ".join(failed[:_SHOWN_FAILED])
    more = f" (and {len(failed) - _SHOWN_FAILED} more)" if len(failed) > _SHOWN_FAILED else ""
    return WalkFailed(f"under {top}, cannot enter {named}{more}")


def tree_bytes(top: str) -> int:
    """The bytes allocated to everything beneath `top` (st_blocks: a sparse file counts what it
    holds, not its size), for the per-call write quota. WalkFailed when a folder could not be
    counted."""
    failed: list[str] = []
    total = sum(st.st_blocks * 512 for _, _, st in _tree(top, failed))
    if failed:
        raise _failed(top, failed)
    return total


def clear_set_id(top: str) -> int:
    """Clears the set-uid and set-gid bits of everything beneath the folder `top` (the
    workspace, after a shell call): a set-id program made in the sandbox would run as its owner
    for any uid that reaches it outside. No symlink is followed (one could name a host file),
    and an entry is changed through its own O_PATH descriptor after checking it is what the
    listing saw. Returns how many; WalkFailed (after clearing all it could) when a folder could
    not be entered."""
    cleared = 0
    failed: list[str] = []
    for dfd, name, st in _tree(top, failed):
        if st.st_mode & SET_ID_BITS and not stat.S_ISLNK(st.st_mode):
            cleared += _clear_one(dfd, name)
    if failed:
        raise _failed(top, failed)
    return cleared


def _clear_one(dfd: int, name: str) -> int:
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode) or not st.st_mode & SET_ID_BITS:
            return 0
        # chmod through the descriptor's magic link: it names this inode, never a path again.
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) & ~SET_ID_BITS)
        return 1
    finally:
        os.close(fd)
