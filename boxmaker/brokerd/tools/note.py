"""`note`: appends to <home>/memory/notes.md, or (approved) to <home>/memory/core.md.

One append is one write with O_APPEND on a regular file opened with O_NOFOLLOW, so a symlink
planted at the note's path is refused, and concurrent notes never interleave inside a line.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from boxmaker.brokerd.paths import PathRefused, check_regular
from boxmaker.brokerd.tools.kind import Args, BadArguments, Context, GrantKind, Setup, Target, Tool
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

FILES = {"notes": "notes.md", "core": "core.md"}


@dataclass(frozen=True, slots=True)
class NoteArgs:
    """A `note` call's arguments, parsed once (the row's `parse`)."""

    text: str
    file: str = "notes"  # a key of FILES

    @property
    def shown(self) -> str:
        return f"memory/{FILES[self.file]}"

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class Memory:
    """note's state: the memory folder under [broker] home, and the most one note may add."""

    home: str
    max_write_bytes: int

    def path(self, file: str) -> str:
        return os.path.join(self.home, "memory", FILES[file])

    def append(self, note: NoteArgs) -> ToolResponse:
        if note.size > self.max_write_bytes:
            raise PathRefused(f"the note is {note.size} bytes, over [broker] max_write_bytes")
        folder = os.path.join(self.home, "memory")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode):
            raise PathRefused(f"{folder} is not a folder; refused")
        text = note.text.rstrip("\n") + "\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.path(note.file), flags | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise PathRefused(f"{note.shown}: {exc.strerror}") from None
        try:
            check_regular(os.fstat(fd), note.shown)
            os.write(fd, text.encode("utf-8", "surrogatepass"))
            os.fsync(fd)
        finally:
            os.close(fd)
        return ToolResponse(
            f"noted in {note.shown}", ResultClass.PUBLIC, untrusted=False, truncated=False
        )


def _parse(args: Args) -> NoteArgs:
    file = args.get("file", "notes")
    if file not in FILES:
        raise BadArguments('file must be "notes" or "core"')
    return NoteArgs(args["text"], file)


def _summary(ctx: Context, _target: Target, _args: Args) -> str:
    """The whole note, never cut: the owner approves what they read."""
    note = ctx.arguments(NoteArgs)
    return f"append {note.size} bytes to {note.shown}:\n{note.text}"


def _run(ctx: Context, _target: Target, _args: Args, _class: ResultClass) -> ToolResponse:
    return ctx.state(Memory).append(ctx.arguments(NoteArgs))


def _memory(setup: Setup) -> Memory:
    return Memory(setup.config.home, setup.config.max_write_bytes)


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
    _summary,
    GrantKind.NAMES,
    lambda args, _ws: str(args.get("file", "notes")),
    names=tuple(FILES),
    writes=True,
    untrusted=False,  # it answers where it noted, nothing it read
    always=_always,
    parse=_parse,
    ask_always={"core": "memory/core.md goes into every baseline: the owner approves"},
    state=_memory,  # the memory folder under [broker] home (never the workspace)
)
