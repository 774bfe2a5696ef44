"""`find_files`: the files and folders under a workspace folder whose name matches, and its row.

It is list_dir walked down: each folder is opened beneath the workspace as list_dir opens it
(paths.py: openat2 RESOLVE_BENEATH, or the O_NOFOLLOW walk), symlinks are listed but never
followed (list_entries marks only real folders with /), and a name the grants deny to it (or to
read_file or list_dir) is neither shown nor walked. It reads names only, and needs list_dir's
decision on the folder too (`reads_as`). The walk is bounded by `[broker.find_files]`: results,
depth and entries looked at, and stops when loopd gives up on the call. What it answers is
untrusted: a name is text someone chose.
"""

from __future__ import annotations

import fnmatch
from collections import deque
from dataclasses import dataclass
from typing import Annotated

from boxmaker._config.kinds import integer
from boxmaker.brokerd.paths import PathRefused, list_entries
from boxmaker.brokerd.targets import split_path
from boxmaker.brokerd.tools.kind import (
    Args,
    BadArguments,
    Context,
    GrantKind,
    Target,
    Tool,
    exact_path,
)
from boxmaker.brokerd.tools.spec import PATH
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

NAME = "find_files"
MAX_PATTERN = 255  # a file name's own limit
GLOB = frozenset("*?[")


@dataclass(frozen=True, slots=True, kw_only=True)
class FindLimits:
    """`[broker.find_files]`: how far one call may look."""

    max_results: Annotated[int, integer(1, 10_000, "paths")] = 200
    max_depth: Annotated[int, integer(1, 64, "levels of folders, the one given is 1")] = 16
    max_entries: Annotated[int, integer(100, 1_000_000, "names looked at")] = 20_000


@dataclass(frozen=True, slots=True)
class FindArgs:
    """A find_files call's arguments, parsed once (the row's `parse`)."""

    path: str
    name: str

    def matches(self, name: str) -> bool:
        """A glob (`*.py`, `test_?.txt`) matches the whole name, case and all; plain text is
        looked for anywhere in the name, in any case."""
        if GLOB & set(self.name):
            return fnmatch.fnmatchcase(name, self.name)
        return self.name.casefold() in name.casefold()


def _parse(args: Args) -> FindArgs:
    name = args["name"]
    if not name or "/" in name or "\0" in name or len(name) > MAX_PATTERN:
        raise BadArguments(
            f"name must be part of a file name or a glob (e.g. report, *.py): no /, at most "
            f"{MAX_PATTERN} characters"
        )
    return FindArgs(args["path"], name)


def find(ctx: Context, start: tuple[str, ...], wanted: FindArgs, limits: FindLimits) -> str:
    """The matching paths under `start`, one a line (folders end in /), and why it stopped
    short when it did. Breadth first, so what is near the folder comes first."""
    found: list[str] = []
    looked = 0
    queue: deque[tuple[tuple[str, ...], int]] = deque([(start, 0)])
    stopped = ""
    while queue and not stopped:
        folder, depth = queue.popleft()
        if ctx.cancelled():
            return "error: cancelled: loopd gave up on the call"
        try:
            names = list_entries(ctx.ws, folder)
        except (PathRefused, OSError):
            if folder == start:
                raise  # the folder asked for: its error is the answer
            continue  # removed meanwhile, or a name list_entries had to escape
        for entry in names:
            looked += 1
            if looked > limits.max_entries:
                stopped = f"stopped after looking at {limits.max_entries} names; give a deeper path"
                break
            bare = entry.rstrip("/")
            child = (*folder, bare)
            if str(ctx.verdict(NAME, child).mode) == "deny":
                continue  # as far as the model can tell, it is not there
            if wanted.matches(bare):
                found.append("/".join(child) + ("/" if entry.endswith("/") else ""))
                if len(found) >= limits.max_results:
                    stopped = f"stopped at {limits.max_results} results; give a narrower name"
                    break
            if entry.endswith("/") and depth + 1 < limits.max_depth:
                queue.append((child, depth + 1))
    where = "/".join(start) or "."
    shown = "\n".join(found) if found else f"nothing under {where} matches {wanted.name!r}"
    return f"{shown}\n[{stopped}]" if stopped else shown


def _run(ctx: Context, target: Target, _args: Args, class_: ResultClass) -> ToolResponse:
    assert isinstance(target, tuple)
    text = find(ctx, target, ctx.arguments(FindArgs), ctx.state(FindLimits))
    return ctx.capped(ToolResponse(text, ResultClass.PUBLIC, untrusted=True, truncated=False))


def _summary(ctx: Context, target: Target, _args: Args) -> str:
    assert isinstance(target, tuple)
    return f"find names matching {ctx.arguments(FindArgs).name!r} under {'/'.join(target) or '.'}"


FIND_FILES = Tool(
    ToolSchema(
        NAME,
        "Finds files and folders under a folder of the workspace by name: part of the name "
        "(any case), or a glob such as *.py. One path a line, folders ending in /.",
        {
            "type": "object",
            "properties": {
                "path": PATH,
                "name": {"type": "string", "description": "Part of a file name, or a glob."},
            },
            "required": ["path", "name"],
        },
    ),
    {"path": str, "name": str},
    _run,
    _summary,
    GrantKind.PATHS,
    lambda args, workspace: split_path(args["path"], workspace),
    reads_as="list_dir",  # finding is listing, folder after folder
    denied_as=("read_file", "list_dir"),  # what they deny it does not show either
    writes=False,
    untrusted=True,
    always=exact_path,
    parse=_parse,
    section=FindLimits,  # and its state: the limits as read
)
