"""A hash-chained log rotated into files (brokerd's decision log, brokerd/log.py): where its
files are and their bytes as one chain, what `brokerd verify`, `bxctl verify-broker` and
`bxctl history` read. The chain check itself is chain.py's, the one both verifiers and
brokerd's open use.

Every file is read by the home-file rules (session/files.py: no link followed, a FIFO never
waited on, a regular file, at most MAX_FILE_BYTES; MAX_CHAIN_BYTES in all), and every failure
names the file and the line in it ("decisions.jsonl.2 line 51"), not a line of the files
joined."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .chain import ChainError, verify_chain
from .errors import SessionError
from .files import open_regular, read_bounded

MAX_FILE_BYTES = 256 << 20  # a rotated file is log_rotate_bytes and a line; an old one more
MAX_CHAIN_BYTES = 1 << 30
_LINE = re.compile(r"\bline ([0-9]+)\b")


class ChainFileError(OSError):
    """A file of the log cannot be read as one (a FIFO, a link, too large), or one is missing;
    the message names it and what to do."""


def archives(path: str) -> list[str]:
    """The rotated files of the log at `path`, oldest first (`<log>.1`, `<log>.2`, ...)."""
    folder, name = os.path.split(path)
    pattern = re.compile(re.escape(name) + r"\.([1-9][0-9]*)")
    entries: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        entries = os.listdir(folder or ".")
    found = [(int(m.group(1)), e) for e in entries if (m := pattern.fullmatch(e))]
    return [os.path.join(folder, e) for _, e in sorted(found)]


@dataclass(frozen=True, slots=True)
class ChainFiles:
    """The log's files, oldest first, each with its bytes and its first line's number in the
    chain the files make joined."""

    files: tuple[tuple[str, bytes, int], ...]

    @property
    def data(self) -> bytes:
        return b"".join(data for _, data, _ in self.files)

    def where(self, n: int) -> str:
        """Line `n` of the joined files as `<file> line <m>`."""
        for name, _, first in reversed(self.files):
            if n >= first:
                return f"{os.path.basename(name)} line {n - first + 1}"
        return f"line {n}"

    def locate(self, message: str) -> str:
        """`message` with each "line N" of the joined files named by its file and line."""
        if not self.files:
            return message
        return _LINE.sub(lambda m: self.where(int(m.group(1))), message)


def _read(path: str, total: int) -> bytes:
    try:
        fd = open_regular(Path(path))
    except SessionError as exc:
        raise ChainFileError(str(exc)) from None
    try:
        data = read_bounded(fd, min(MAX_FILE_BYTES, MAX_CHAIN_BYTES - total), path)
    except SessionError as exc:
        raise ChainFileError(
            f"{exc} (the log's files are read up to {MAX_CHAIN_BYTES:,} bytes in all)"
        ) from None
    finally:
        os.close(fd)
    return data


def load_chain(path: str) -> ChainFiles:
    """Every file of the log, oldest first. The current file may be missing with no rotated
    file (an empty log), or replaced by `<log>.next` (a rotation's last step not yet made:
    brokerd's next start makes it). ChainFileError when a file is not a regular file, is over
    its bound, or the current file is missing or empty after a rotation."""
    files: list[tuple[str, bytes, int]] = []
    total, line = 0, 1
    olds = archives(path)
    for name in olds:
        data = _read(name, total)
        files.append((name, data, line))
        total, line = total + len(data), line + data.count(b"\n")
    current = path
    if olds and not os.path.lexists(path) and os.path.lexists(f"{path}.next"):
        current = f"{path}.next"
    try:
        data = _read(current, total)
    except FileNotFoundError:
        if olds:
            raise ChainFileError(_missing(path, olds[-1], "missing")) from None
        return ChainFiles(tuple(files))
    if olds and not data:
        raise ChainFileError(_missing(path, olds[-1], "empty"))
    files.append((current, data, line))
    return ChainFiles(tuple(files))


def _missing(path: str, last: str, what: str) -> str:
    return (
        f"{path}: {what}, but {os.path.basename(last)} is there: the file after it, whose first "
        f'line is the carry from "{os.path.basename(last)}", is gone (emptied or deleted after a '
        "rotation); the lines written since then are lost"
    )


def read_chain(path: str) -> bytes:
    """Every file of the log, oldest first, as one chain (load_chain's bytes)."""
    return load_chain(path).data


def verify_files(path: str) -> tuple[ChainFiles, list[dict[str, Any]]]:
    """The log's files and their records, the chain checked across them: each file after the
    first begins with the carry from the file before it. ChainError names the file and its
    line; ChainFileError (an OSError) a file that cannot be read."""
    chain = load_chain(path)
    try:
        records, _ = verify_chain(chain.data)
    except ChainError as exc:
        raise ChainError(chain.locate(str(exc))) from None
    for (before, _, _), (name, _, first) in zip(chain.files, chain.files[1:], strict=False):
        rec = records[first - 1] if first - 1 < len(records) else {}
        want = os.path.basename(before)
        if rec.get("type") != "carry" or rec.get("from") != want:
            raise ChainError(
                f"{os.path.basename(name)} line 1: expected the carry from {want!r} "
                f"(a rotated file begins with it), got a {rec.get('type')!r} line"
            )
    return chain, records
