"""The file tools: read_file, list_dir, write_file, edit_file, beneath the workspace only, and
their rows of the table of tools.

Each takes the parsed arguments and the path's components (targets.split_path made them) and
returns a ToolResponse; a refused path, a missing file, an oversize file are results too. What
read_file, list_dir and edit_file answer is `untrusted`, errors included: a file may hold text
written to steer the model, and an edit's "found 2 times" says what the file holds. edit_file
reads as read_file: it needs read_file's decision on the same file too.
"""

from __future__ import annotations

import codecs
import difflib
from collections import Counter
from collections.abc import Callable
from typing import Any

from boxmaker.brokerd.paths import (
    PathRefused,
    Workspace,
    list_entries,
    missing_folders,
    read_window,
    write_atomic,
)
from boxmaker.brokerd.targets import split_path
from boxmaker.brokerd.tools.kind import Args, Context, GrantKind, Setup, Target, Tool, exact_path
from boxmaker.brokerd.tools.spec import PATH
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

WINDOW_NOTE_BYTES = 96  # room for the "[cut: bytes a..b of n shown; ...]" line


def response(content: str, cap: int, *, untrusted: bool = False, more: str = "") -> ToolResponse:
    """`content` cut to `cap` UTF-8 bytes at a character boundary, saying so when it is cut."""
    data = content.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return ToolResponse(content, ResultClass.PUBLIC, untrusted=untrusted, truncated=False)
    note = f"\n[cut: {cap} of {len(data)} bytes shown{more}]"
    head = data[: max(0, cap - len(note.encode()))].decode("utf-8", "ignore")
    return ToolResponse(head + note, ResultClass.PUBLIC, untrusted=untrusted, truncated=True)


def error(text: str) -> ToolResponse:
    return ToolResponse(f"error: {text}", ResultClass.PUBLIC, untrusted=False, truncated=False)


class FileTools:
    def __init__(self, ws: Workspace, cap: int, max_file: int, max_write: int) -> None:
        self.ws, self.cap, self.max_file, self.max_write = ws, cap, max_file, max_write

    def read_file(self, parts: tuple[str, ...], args: dict[str, Any]) -> ToolResponse:
        offset = args.get("offset", 0)
        # The window leaves room under the cap for the line that says where to go on.
        # A limit of 0 is "no limit" (Qwen2.5-Coder sent limit 0 and read nothing of book.md).
        limit = min(args.get("limit") or self.cap, self.cap - WINDOW_NOTE_BYTES)
        data, size = read_window(self.ws, parts, offset, limit, self.max_file)
        # A character cut at the window's end is left for the next window, not mangled.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final=offset + len(data) >= size)
        end = offset + len(data) - len(decoder.getstate()[0])
        if end < size:
            text += f"\n[cut: bytes {offset}..{end} of {size} shown; call again with offset={end}]"
        resp = response(text, self.cap, untrusted=True)
        cut = end < size or resp.truncated
        return ToolResponse(resp.content, resp.class_, untrusted=True, truncated=cut)

    def list_dir(
        self,
        parts: tuple[str, ...],
        args: dict[str, Any],
        hidden: Callable[[tuple[str, ...]], bool] = lambda _parts: False,
    ) -> ToolResponse:
        """The folder's names, less those `hidden` says a grant denies (a denied name is not
        there, as far as the model can tell)."""
        names = [n for n in list_entries(self.ws, parts) if not hidden((*parts, n.rstrip("/")))]
        text = f"{tally(names)}:\n" + "\n".join(names) if names else "(empty folder)"
        return response(text, self.cap, untrusted=True)

    def _old(self, parts: tuple[str, ...]) -> bytes | None:
        """The whole file an edit rewrites (None: there is none). Over max_write_bytes it is
        refused by that key's name: an edit writes the file back whole."""
        try:
            data, size = read_window(self.ws, parts, 0, self.max_write + 1, self.max_file)
        except PathRefused as exc:
            if str(exc).endswith("no such file or folder"):
                return None
            raise
        if size > self.max_write:
            raise PathRefused(
                f"{'/'.join(parts)}: the file is {size} bytes, over [broker] max_write_bytes "
                f"({self.max_write}): an edit writes the file back whole; refused"
            )
        return data

    def write_file(self, parts: tuple[str, ...], args: dict[str, Any]) -> ToolResponse:
        data = args["content"].encode("utf-8", "surrogatepass")
        if len(data) > self.max_write:
            raise PathRefused(
                f"the content is {len(data)} bytes, over [broker] max_write_bytes "
                f"({self.max_write})"
            )
        write_atomic(self.ws, parts, data)
        return response(f"wrote {'/'.join(parts)}: {len(data)} bytes", self.cap)

    def _edited(self, parts: tuple[str, ...], args: dict[str, Any]) -> tuple[str, str]:
        old = self._old(parts)
        shown = "/".join(parts)
        if old is None:
            raise PathRefused(f"{shown}: no such file (write_file creates one)")
        text = old.decode("utf-8", "surrogateescape")
        count = text.count(args["old"]) if args["old"] else 0
        if count > 1:
            raise PathRefused(
                f"{shown}: old text found {count} times; it must occur exactly "
                "once (give more context)"
            )
        if count == 0:
            raise PathRefused(f"{shown}: old text not found; {_nearest(text, args['old'])}")
        return text, text.replace(args["old"], args["new"], 1)

    def edit_file(self, parts: tuple[str, ...], args: dict[str, Any]) -> ToolResponse:
        _, new = self._edited(parts, args)
        data = new.encode("utf-8", "surrogateescape")
        if len(data) > self.max_write:
            raise PathRefused(
                f"the edited file would be {len(data)} bytes, over "
                f"[broker] max_write_bytes ({self.max_write})"
            )
        write_atomic(self.ws, parts, data)
        return response(f"edited {'/'.join(parts)}: now {len(data)} bytes", self.cap)

    def write_file_summary(self, parts: tuple[str, ...], args: dict[str, Any]) -> str:
        """What the write would do, for the owner's approval (the owner's eyes only)."""
        size = len(args["content"].encode("utf-8", "surrogatepass"))
        try:
            was = f"replaces {read_window(self.ws, parts, 0, 0, 1 << 62)[1]} bytes"
        except PathRefused as exc:
            if not str(exc).endswith("no such file or folder"):
                raise
            was = "a new file"
        if new_folders := missing_folders(self.ws, parts[:-1]):
            was += f", and {new_folders} new folder(s)"
        # The content whole, under the line: the owner approves what is written, not its size.
        return f"write {'/'.join(parts)}: {size} bytes ({was})\n{args['content']}"

    def edit_file_summary(self, parts: tuple[str, ...], args: dict[str, Any]) -> str:
        """The edit's whole diff (never cut: the owner approves what they read)."""
        shown = "/".join(parts)
        try:
            before, after = self._edited(parts, args)
        except PathRefused as exc:
            return f"edit {shown} (will fail: {exc})"
        before, after = _readable(before), _readable(after)  # for the owner's eyes only
        diff = difflib.unified_diff(
            # Lines end at \n alone: splitlines() also breaks at \r, \x0b, \x85, U+2028...,
            # so an edit that turns one of those into \n showed as no change at all.
            before.split("\n"),
            after.split("\n"),
            f"a/{shown}",
            f"b/{shown}",
            lineterm="",
        )
        return f"edit {shown}:\n" + "\n".join(diff)


_MISSING = "no such file or folder"
SHOWN_ENTRIES = 40  # the most names a missing file's error lists
NEAREST_LINES = 3


def tally(names: list[str]) -> str:
    """The counts of a listing, by kind and extension ("4 files (3 .csv, 1 .txt), 1 folder"):
    a small model counting the lines itself said 4 for 3 (issue 40)."""
    files = [n for n in names if not n.endswith("/")]
    tails = (n.rsplit(".", 1)[1].lower() for n in files if "." in n[1:])
    exts = Counter(t for t in tails if t.isalnum() and len(t) <= 8)
    folders = len(names) - len(files)
    out = []
    if files:
        kinds = ", ".join(f"{count} .{ext}" for ext, count in sorted(exts.items()))
        out.append(
            f"{len(files)} file{'s' if len(files) != 1 else ''}" + (f" ({kinds})" if kinds else "")
        )
    if folders:
        out.append(f"{folders} folder{'s' if folders != 1 else ''}")
    return ", ".join(out)


def _nearest(text: str, old: str) -> str:
    """What an edit whose old text is not in the file should do next: the file's lines nearest
    the old text, to copy from."""
    lines = [line for line in text.split("\n") if line.strip()]
    probe = next((line for line in old.split("\n") if line.strip()), old)
    near = difflib.get_close_matches(probe, lines, NEAREST_LINES, 0.3)
    shown = "; ".join(repr(line) for line in near)
    where = f"the nearest lines are {shown}" if near else "no line is near it"
    return (
        f"{where}. Read the file first (read_file) and give old exactly as it is written "
        "there, or write_file the whole file."
    )


def _around(ctx: Context, parts: tuple[str, ...]) -> str:
    """The entries of the nearest folder above `parts` that exists, for a missing file's error:
    only when list_dir of that folder is allowed without asking (the error must not show what
    an approval would have guarded), less the names the grants deny to list_dir."""
    folder = parts[:-1]
    while True:
        try:
            names = list_entries(ctx.ws, folder)
            break
        except (PathRefused, OSError):
            if not folder:
                return "list_dir shows what is there."
            folder = folder[:-1]
    shown = "/".join(folder) + "/" if folder else "the workspace"
    if str(ctx.verdict("list_dir", folder).mode) != "allow":
        return "list_dir shows what is there."
    names = [
        n for n in names if str(ctx.verdict("list_dir", (*folder, n.rstrip("/"))).mode) != "deny"
    ]
    if not names:
        return f"{shown} is empty."
    more = f" and {len(names) - SHOWN_ENTRIES} more" if len(names) > SHOWN_ENTRIES else ""
    listed = ", ".join(
        ("/".join(folder) + "/" if folder else "") + n for n in names[:SHOWN_ENTRIES]
    )
    return f"{shown} holds: {listed}{more}. Use one of those paths."


def _readable(text: str) -> str:
    """Text read with surrogateescape (to write its bytes back unchanged), made valid UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def file_tools(setup: Setup) -> FileTools:
    """A file tool's state: the workspace and [broker]'s caps."""
    c = setup.config
    return FileTools(setup.ws, c.result_cap_bytes, c.max_file_bytes, c.max_write_bytes)


def _path_target(args: Args, workspace: str) -> Target:
    return split_path(args["path"], workspace)


def _parts(target: Target) -> tuple[str, ...]:
    assert isinstance(target, tuple)
    return target


def _file_tool(
    schema: ToolSchema,
    types: dict[str, type],
    *,
    writes: bool,
    untrusted: bool,
    reads_as: str | None = None,
    denied_as: tuple[str, ...] = (),
    lists: bool = False,
) -> Tool:
    name = schema.name

    def run(ctx: Context, target: Target, args: Args, class_: ResultClass) -> ToolResponse:
        try:
            resp: ToolResponse = getattr(ctx.state(FileTools), name)(_parts(target), args)
        except PathRefused as exc:
            # A missing file names what is there, so the model's next call can be right.
            if not str(exc).endswith(_MISSING):
                raise
            raise PathRefused(f"{exc}; {_around(ctx, _parts(target))}") from None
        return resp

    def run_list(ctx: Context, target: Target, args: Args, class_: ResultClass) -> ToolResponse:
        def hidden(child: tuple[str, ...]) -> bool:
            return str(ctx.verdict(name, child).mode) == "deny"

        resp: ToolResponse = ctx.state(FileTools).list_dir(_parts(target), args, hidden)
        return resp

    def summary(ctx: Context, target: Target, args: Args) -> str:
        own = getattr(ctx.state(FileTools), f"{name}_summary", None)
        if own is None:
            return f"{name} {'/'.join(_parts(target)) or '.'}"
        text: str = own(_parts(target), args)
        return text

    return Tool(
        schema,
        types,
        run_list if lists else run,
        summary,
        GrantKind.PATHS,
        _path_target,
        reads_as=reads_as,
        denied_as=denied_as,
        writes=writes,
        untrusted=untrusted,
        always=exact_path,
        state=file_tools,
    )


READ_FILE = _file_tool(
    ToolSchema(
        "read_file",
        "Reads a text file in the workspace. offset and limit (bytes) read a part of a long file.",
        {
            "type": "object",
            "properties": {
                "path": PATH,
                "offset": {
                    "type": "integer",
                    "description": "The first byte to read, from the start (0 or more); leave "
                    "it out to read the file from its start.",
                },
                "limit": {
                    "type": "integer",
                    "description": "How many bytes at most; 0 or left out: as many as fit.",
                },
            },
            "required": ["path"],
        },
    ),
    {"path": str, "offset": int, "limit": int},
    writes=False,
    untrusted=True,
)
LIST_DIR = _file_tool(
    ToolSchema(
        "list_dir",
        "Lists a folder in the workspace: one entry a line, folders ending in /.",
        {"type": "object", "properties": {"path": PATH}, "required": ["path"]},
    ),
    {"path": str},
    writes=False,
    untrusted=True,
    denied_as=("read_file",),  # a read-denied name is not listed either
    lists=True,
)
WRITE_FILE = _file_tool(
    ToolSchema(
        "write_file",
        "Writes a file in the workspace (replaces it whole, atomically).",
        {
            "type": "object",
            "properties": {"path": PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
    {"path": str, "content": str},
    writes=True,
    untrusted=False,  # it answers what it wrote, nothing it read
    denied_as=("read_file", "list_dir"),  # "is a folder", "not a folder" tell what is there
)
EDIT_FILE = _file_tool(
    ToolSchema(
        "edit_file",
        "Edits a file in the workspace: replaces the text old, which must occur exactly once, "
        "by new.",
        {
            "type": "object",
            "properties": {"path": PATH, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"],
        },
    ),
    {"path": str, "old": str, "new": str},
    writes=True,
    untrusted=True,
    reads_as="read_file",
    denied_as=("list_dir",),
)
