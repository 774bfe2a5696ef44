"""The tools' schemas as the model sees them, and the check of parsed arguments. [core]

brokerd checks arguments itself: loopd checks them too, but brokerd trusts nothing loopd sends.
"""

from __future__ import annotations

from typing import Any

import orjson

from boxmaker.proto import ToolSchema

MAX_OFFSET = 1 << 62  # offsets and limits: far past any file, inside pread's off_t
_PATH = {"type": "string", "description": "A path inside the workspace."}

# `clock` reads nothing and reaches nothing: it needs no grant, and it is a core tool in every
# session's tools array (loopd's registry), so it is never listed for find_tool.
CLOCK = "clock"

SCHEMAS: dict[str, ToolSchema] = {
    CLOCK: ToolSchema(
        CLOCK,
        "Returns the current date and time in UTC, as RFC 3339 text.",
        {"type": "object", "properties": {}},
    ),
    "read_file": ToolSchema(
        "read_file",
        "Reads a text file in the workspace. offset and limit (bytes) read a part of a long file.",
        {
            "type": "object",
            "properties": {
                "path": _PATH,
                "offset": {"type": "integer", "description": "The first byte to read."},
                "limit": {"type": "integer", "description": "How many bytes at most."},
            },
            "required": ["path"],
        },
    ),
    "list_dir": ToolSchema(
        "list_dir",
        "Lists a folder in the workspace: one entry a line, folders ending in /.",
        {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    ),
    "write_file": ToolSchema(
        "write_file",
        "Writes a file in the workspace (replaces it whole, atomically).",
        {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
    "edit_file": ToolSchema(
        "edit_file",
        "Edits a file in the workspace: replaces the text old, which must occur exactly once, "
        "by new.",
        {
            "type": "object",
            "properties": {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"],
        },
    ),
    "note": ToolSchema(
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
    "shell": ToolSchema(
        "shell",
        "Runs a command with /bin/sh in a sandbox: the workspace is the current folder "
        "(read-write), the system is read-only, there is no network. Output is capped.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the shell command line"},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "wall-clock limit"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    ),
    "fetch": ToolSchema(
        "fetch",
        "Fetches a web page (http or https) and returns its readable text.",
        {
            "type": "object",
            "properties": {"url": {"type": "string", "description": "an http:// or https:// URL"}},
            "required": ["url"],
            "additionalProperties": False,
        },
    ),
}

_TYPES: dict[str, dict[str, type]] = {
    CLOCK: {},
    "read_file": {"path": str, "offset": int, "limit": int},
    "list_dir": {"path": str},
    "write_file": {"path": str, "content": str},
    "edit_file": {"path": str, "old": str, "new": str},
    "note": {"text": str, "file": str},
    "shell": {"command": str, "timeout_ms": int},
    "fetch": {"url": str},
}


def parse_arguments(tool: str, text: str) -> dict[str, Any] | str:
    """The arguments as a dict, or a message that says what is wrong with them."""
    if tool not in SCHEMAS:
        return f"brokerd has no tool named {tool!r} (it has {', '.join(SCHEMAS)})"
    try:
        args = orjson.loads(text)
    except orjson.JSONDecodeError:
        return f"{tool}: the arguments are not JSON"
    if not isinstance(args, dict):
        return f"{tool}: the arguments must be a JSON object"
    types = _TYPES[tool]
    if unknown := sorted(args.keys() - types.keys()):
        return f"{tool}: unknown argument(s) {', '.join(unknown)}"
    for name in SCHEMAS[tool].parameters.get("required", ()):
        if name not in args:
            return f"{tool}: missing argument {name}"
    for name, value in args.items():
        want = types[name]
        if type(value) is not want:
            return f"{tool}: {name} must be a {'string' if want is str else 'whole number'}"
        if isinstance(value, int) and not 0 <= value <= MAX_OFFSET:
            return f"{tool}: {name} must be 0 to {MAX_OFFSET}"
    if tool == "note" and args.get("file", "notes") not in ("notes", "core"):
        return 'note: file must be "notes" or "core"'
    return args
