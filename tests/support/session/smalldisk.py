"""A small real filesystem that fills up: a tmpfs of a few pages, mounted for one test.

    with small_disk(tmp_path / "disk") as disk:
        fill(disk)      # takes every free page; returns the filler file
        ...             # writes on it now fail with ENOSPC (or come back short)
        free(disk)      # removes the filler

Mounting needs root (CI runs as root; so does the dev container). Where `mount` is refused the
test fails with the reason rather than skip: a full-disk test that quietly stops running proves
nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

SIZE = "64k"
FILLER = "filler"


@contextlib.contextmanager
def small_disk(path: Path, size: str = SIZE) -> Iterator[Path]:
    """Mounts a tmpfs of `size` at `path` (made if missing) and unmounts it afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"cannot mount a {size} tmpfs at {path} for the full-disk test (it needs root): "
            f"{done.stderr.strip() or done.returncode}"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=False)


def fill(disk: Path) -> Path:
    """Writes a filler file until the filesystem is full; returns it."""
    filler = disk / FILLER
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = b"\0" * 4096
    try:
        while True:
            try:
                if os.write(fd, block) < len(block):
                    continue  # the last page went: the next write says ENOSPC
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        while True:  # single bytes too: nothing left anywhere, not even in a partial page
            try:
                os.write(fd, b"\0")
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return filler


def free(disk: Path) -> None:
    (disk / FILLER).unlink()
