"""The file tools: read_file, list_dir, write_file, edit_file, beneath the workspace only.

Each takes the parsed arguments and the path's components (grants.split_path made them) and
returns a ToolResponse; a refused path, a missing file, an oversize file are results too. File
contents are `untrusted`: they may hold text written to steer the model.
"""

from __future__ import annotations

import codecs
import difflib
from typing import Any

from boxmaker.brokerd.paths import (
    PathRefused,
    Workspace,
    list_entries,
    missing_folders,
    read_window,
    write_atomic,
)
from boxmaker.proto import ResultClass, ToolResponse

MAX_DIFF_LINES = 80
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
        limit = min(args.get("limit", self.cap), self.cap - WINDOW_NOTE_BYTES)
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

    def list_dir(self, parts: tuple[str, ...], args: dict[str, Any]) -> ToolResponse:
        names = list_entries(self.ws, parts)
        return response("\n".join(names) if names else "(empty folder)", self.cap, untrusted=True)

    def _old(self, parts: tuple[str, ...]) -> bytes | None:
        try:
            return read_window(
                self.ws, parts, 0, self.max_write, self.max_write, "max_write_bytes"
            )[0]
        except PathRefused as exc:
            if str(exc).endswith("no such file or folder"):
                return None
            raise

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
        if count != 1:
            raise PathRefused(
                f"{shown}: old text found {count} times; it must occur exactly "
                "once (give more context)"
            )
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

    def summary(self, tool: str, parts: tuple[str, ...], args: dict[str, Any]) -> str:
        """What the call would do, for the owner's approval."""
        shown = "/".join(parts) or "."
        if tool == "write_file":
            size = len(args["content"].encode("utf-8", "surrogatepass"))
            old = self._old(parts)
            was = "a new file" if old is None else f"replaces {len(old)} bytes"
            if new_folders := missing_folders(self.ws, parts[:-1]):
                was += f", and {new_folders} new folder(s)"
            return f"write {shown}: {size} bytes ({was})"
        if tool == "edit_file":
            try:
                before, after = self._edited(parts, args)
            except PathRefused as exc:
                return f"edit {shown} (will fail: {exc})"
            before, after = _readable(before), _readable(after)  # for the owner's eyes only
            diff = list(
                difflib.unified_diff(
                    before.splitlines(), after.splitlines(), f"a/{shown}", f"b/{shown}", lineterm=""
                )
            )
            if len(diff) > MAX_DIFF_LINES:
                diff = [*diff[:MAX_DIFF_LINES], f"... ({len(diff) - MAX_DIFF_LINES} more lines)"]
            return f"edit {shown}:\n" + "\n".join(diff)
        return f"{tool} {shown}"


def _readable(text: str) -> str:
    """Text read with surrogateescape (to write its bytes back unchanged), made valid UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
