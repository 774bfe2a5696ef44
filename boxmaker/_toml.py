"""The one TOML writer: dicts of plain values to TOML text (for the configs that `make
verify-device` and the tests write; tomllib reads TOML but does not write it).

Top-level dicts become [sections] (recursively, as [a.b]); deeper values are written inline.
Strings, paths, numbers, booleans, lists and dicts are covered; anything else is a TypeError.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    raise TypeError(f"no TOML form for {value!r}")


def toml_dumps(table: Mapping[str, Any], where: str = "") -> str:
    lines = [
        f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)
    ]
    for key, value in table.items():
        if isinstance(value, dict):
            name = f"{where}.{key}" if where else key
            lines += ["", f"[{name}]", toml_dumps(value, name)]
    return "\n".join(lines) + "\n"
