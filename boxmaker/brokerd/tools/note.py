"""`note`: appends to <home>/memory/notes.md, or (approved) to <home>/memory/core.md.

One append is one write with O_APPEND on a regular file opened with O_NOFOLLOW, so a symlink
planted at the note's path is refused, and concurrent notes never interleave inside a line.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from boxmaker.brokerd.paths import PathRefused, check_regular
from boxmaker.brokerd.tools.kind import Args, Context, GrantKind, Target, Tool
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

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


def note_summary(ctx: Context, target: Target, args: Args) -> str:
    """The whole note, never cut: the owner approves what they read."""
    file = FILES[args.get("file", "notes")]
    text = args["text"]
    return f"append {len(text.encode('utf-8', 'surrogatepass'))} bytes to memory/{file}:\n{text}"


def _run(ctx: Context, target: Target, args: Args, class_: ResultClass) -> ToolResponse:
    size = len(args["text"].encode("utf-8", "surrogatepass"))
    if size > ctx.config.max_write_bytes:
        raise PathRefused(f"the note is {size} bytes, over [broker] max_write_bytes")
    return append_note(ctx.config.home, args)


def _check(args: Args) -> str | None:
    return None if args.get("file", "notes") in FILES else 'file must be "notes" or "core"'


def _always(target: Target, _args: Args) -> tuple[str, str] | str:
    if target == "core":
        return "nothing: memory/core.md goes into every baseline, so it is asked every time"
    return ("files", str(target))


NOTE = Tool(
    ToolSchema(
        "note",
        "Keeps a note for later: appends text to memory/notes.md (file notes), or to "
        "memory/core.md (file core, read at every session's start; the owner approves).",
        {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "file": {"type": "string", "enum": ["notes", "core"]},
            },
            "required": ["text"],
        },
    ),
    {"text": str, "file": str},
    _run,
    note_summary,
    GrantKind.NAMES,
    lambda args, _ws: str(args.get("file", "notes")),
    names=tuple(FILES),
    writes=True,
    untrusted=False,  # it answers where it noted, nothing it read
    always=_always,
    check=_check,
    ask_always={"core": "memory/core.md goes into every baseline: the owner approves"},
)
