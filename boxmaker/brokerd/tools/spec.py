"""The check of a call's arguments against its tool's row. [core]

The types, the required arguments, then the row's own `parse`, once: its value is what the
tool's `summary` and `run` read.
brokerd checks arguments itself: loopd checks them too, but brokerd trusts nothing loopd sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from boxmaker.brokerd.tools.kind import BadArguments, Tool

MAX_OFFSET = 1 << 62  # offsets and limits: far past any file, inside pread's off_t
PATH = {"type": "string", "description": "A path inside the workspace."}


def parse_arguments(
    tool: Tool | None, name: str, text: str, names: Sequence[str]
) -> tuple[dict[str, Any], object] | str:
    """The arguments as a dict and as the row's `parse` made them (the dict when it has none),
    or a message that says what is wrong with them."""
    if tool is None:
        return f"brokerd has no tool named {name!r} (it has {', '.join(names)})"
    try:
        args = orjson.loads(text)
    except orjson.JSONDecodeError:
        return f"{name}: the arguments are not JSON"
    if not isinstance(args, dict):
        return f"{name}: the arguments must be a JSON object"
    types = tool.types
    if unknown := sorted(args.keys() - types.keys()):
        return f"{name}: unknown argument(s) {', '.join(unknown)}"
    for arg in tool.schema.parameters.get("required", ()):
        if arg not in args:
            return f"{name}: missing argument {arg}"
    for arg, value in args.items():
        want = types[arg]
        if type(value) is not want:
            return f"{name}: {arg} must be a {'string' if want is str else 'whole number'}"
        if isinstance(value, int) and value < 0:  # a model asking for "the end" sends -1
            return f"{name}: {arg} cannot be negative ({value}); leave {arg} out for its default"
        if isinstance(value, int) and value > MAX_OFFSET:
            return f"{name}: {arg} must be at most {MAX_OFFSET}"
    if tool.parse is None:
        return args, args
    try:
        return args, tool.parse(args)
    except BadArguments as exc:
        return f"{name}: {exc}"
