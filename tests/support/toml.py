"""The one TOML writer for test configs: dicts of plain values to TOML text.

tomllib reads TOML but does not write it; the configs tests write are small tables of strings,
paths, numbers, booleans and lists, which this covers. Anything else is a TypeError.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


def toml_dumps(table: Mapping[str, Any], where: str = "") -> str:
    """Top-level dicts become [sections] (recursively); deeper values are written inline."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for key, value in table.items():
        if isinstance(value, dict):
            name = f"{where}.{key}" if where else key
            lines += ["", f"[{name}]", toml_dumps(value, name)]
    return "\n".join(lines) + "\n"
