"""`note`: appends to <home>/memory/notes.md, or (approved) to <home>/memory/core.md.

One append is one write with O_APPEND on a regular file opened with O_NOFOLLOW, so a symlink
planted at the note's path is refused, and concurrent notes never interleave inside a line.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from boxmaker.brokerd.paths import PathRefused, check_regular
from boxmaker.proto import ResultClass, ToolResponse

FILES = {"notes": "notes.md", "core": "core.md"}


def note_path(home: str, file: str) -> str:
    return os.path.join(home, "memory", FILES[file])


def append_note(home: str, args: dict[str, Any]) -> ToolResponse:
    file = args.get("file", "notes")
    folder = os.path.join(home, "memory")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise PathRefused(f"{folder} is not a folder; refused")
    text = args["text"].rstrip("\n") + "\n"
    path = note_path(home, file)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise PathRefused(f"memory/{FILES[file]}: {exc.strerror}") from None
    try:
        check_regular(os.fstat(fd), f"memory/{FILES[file]}")
        os.write(fd, text.encode("utf-8", "surrogatepass"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return ToolResponse(
        f"noted in memory/{FILES[file]}", ResultClass.PUBLIC, untrusted=False, truncated=False
    )


def note_summary(args: dict[str, Any]) -> str:
    file = FILES[args.get("file", "notes")]
    text = args["text"]
    shown = text if len(text) <= 400 else text[:400] + f"... ({len(text)} characters)"
    return f"append {len(text.encode('utf-8', 'surrogatepass'))} bytes to memory/{file}:\n{shown}"
