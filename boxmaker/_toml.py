"""The one TOML writer: plain values to TOML text (tomllib reads TOML but does not write it). [core]

Used for the configs `make verify-device` and the tests write, and for the rules brokerd adds
to the owner's grants file (brokerd/grants.py, brokerd/amend.py). Top-level dicts become
[sections] (recursively, as [a.b]), `toml_array_item` writes one `[[name]]` entry; deeper values
are written inline. Strings, paths, numbers, booleans, lists and dicts are covered; anything else
is a TypeError. Strings are basic strings with every control character escaped, DEL (U+007F)
included, which TOML forbids raw; other characters are written as they are (the file is UTF-8),
and a lone surrogate, which UTF-8 cannot hold, is a TypeError.
"""

import math
import re
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_ESCAPES["\r"] = "\\r"


def toml_string(text: str) -> str:
    """`text` as a TOML basic string."""
    out = ['"']
    for c in text:
        code = ord(c)
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise TypeError(f"no TOML form for a lone surrogate (U+{code:04X}) in {text!r:.60}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)  # inf, -inf, nan
    if isinstance(value, str):
        return toml_string(value)
    if hasattr(value, "__fspath__"):  # a path
        return toml_string(str(value.__fspath__()))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    raise TypeError(f"no TOML form for {value!r}")


def toml_dumps(table: Mapping[str, Any], where: str = "") -> str:
    lines = [
        f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)
    ]
    for key, value in table.items():
        if isinstance(value, dict):
            name = f"{where}.{toml_key(key)}" if where else toml_key(key)
            lines += ["", f"[{name}]", toml_dumps(value, name)]
    return "\n".join(lines) + "\n"


def toml_array_item(name: str, table: Mapping[str, Any]) -> str:
    """One entry of the array of tables `name`: `[[name]]`, then its keys (dicts inline)."""
    lines = [f"[[{toml_key(name)}]]"]
    lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
