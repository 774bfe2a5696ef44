"""The value kinds of a config (loopd's, gatewayd's, brokerd's): what a key's value must be.

A `Kind` is `expected` (the words an error message uses) and `convert` (checks one TOML value and
returns the typed one, or raises `Bad`). A config module declares every key with one of these;
walker.py applies them. Every number kind has a maximum and every table sent to the server a
nesting limit, so a value that loads can be used: a timeout fits a socket's timeval and a
thread's wait, a count fits orjson's 64 bits and llama-server's 32, a table is JSON that orjson
can write.
"""

from __future__ import annotations

import datetime
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boxmaker._daemon import MAX_UNIX_SOCKET_PATH_BYTES

# The maxima, each far above any real setting and far below what breaks the code that uses it.
MAX_MS = 86_400_000  # one day: no wait of loopd's needs more; 10**13 ms overflowed a timeval
MAX_BYTES = 1 << 30  # 1 GiB: a cap, never allocated up front; the largest default is 4 MiB
MAX_TOKENS = 1 << 24  # 16,777,216: above the largest context windows; llama-server reads int32
MAX_SLOTS = 1024  # slot ids and total_slots: far above any server's -np
MAX_JSON_DEPTH = 64  # a table sent to the server; orjson writes at most 254 levels in all
MAX_PATH_BYTES = 4095  # Linux's PATH_MAX (4096) less the NUL
MAX_UID = 2**32 - 2  # (uid_t)-1 means "no uid"
_JSON_INTEGERS = range(-(2**63), 2**64)  # what orjson writes

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """`text` with control characters (newlines too) escaped, so a message stays one line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ConfigError(Exception):
    """The file is missing, unreadable, not TOML, or has a wrong key: `key` (dotted) or None.

    Its message is one line that starts with the file's name.
    """

    def __init__(self, source: str, key: str | None, message: str) -> None:
        super().__init__(one_line(f"{source}: {message}"))
        self.source = source
        self.key = key


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a kind may need besides the value: the file's name and folder, the environment."""

    source: str
    base_dir: Path
    env: Mapping[str, str]


class Bad(Exception):
    """Raised by a Kind: `got` describes the value; `expected` overrides the kind's words."""

    def __init__(self, got: str, expected: str | None = None) -> None:
        super().__init__(got)
        self.got = got
        self.expected = expected


@dataclass(frozen=True, slots=True)
class Kind:
    """What a key's value must be: `expected` in words, `convert` checks it (raises Bad)."""

    expected: str
    convert: Callable[[object, Ctx], object]
    # Applied to a default that was not in the file (paths resolve against the config's folder).
    finish_default: Callable[[object, Ctx], object] = lambda value, _ctx: value
    bounds: tuple[int, int] | None = None  # an integer kind's (minimum, maximum)


@dataclass(frozen=True, slots=True)
class Env:
    """In a key's Annotated[...]: when the key is absent, this (non-empty) variable is used."""

    name: str


def type_name(value: object) -> str:
    # tomllib gives exact types, so a bool is looked up as bool, never as int.
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    names |= {dict: "table", datetime.datetime: "datetime", datetime.date: "date"}
    return names.get(type(value), "time" if isinstance(value, datetime.time) else "value")


def show(value: object) -> str:
    """The value as a message quotes it: one line, at most 80 characters."""
    if isinstance(value, str):
        text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    else:
        text = repr(value)
    return clip(one_line(text))


def kind(
    expected: str,
    accepts: tuple[type, ...],
    ok: Callable[[Any], object] = lambda _value: True,
    convert: Callable[[Any], object] = lambda value: value,
) -> Kind:
    """A kind that takes TOML values of the `accepts` types (a bool only if bool is listed) for
    which ok(value) holds, then converts them."""

    def check(value: object, _ctx: Ctx) -> object:
        if not isinstance(value, accepts) or (isinstance(value, bool) and bool not in accepts):
            raise Bad(type_name(value))
        if not ok(value):
            raise Bad(show(value))
        return convert(value)

    return Kind(expected, check)


def integer(minimum: int, maximum: int, unit: str = "") -> Kind:
    """An integer in minimum..maximum; every integer key has a maximum."""
    words = f"an integer from {minimum} to {maximum}" + (f" ({unit})" if unit else "")
    plain = kind(words, (int,), lambda v: minimum <= v <= maximum)
    return Kind(words, plain.convert, bounds=(minimum, maximum))


def number(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Kind:
    """A finite number between lo and hi (an integer is taken as a float)."""
    if lo_open:
        words = f"a number above {lo:g} and at most {hi:g}"
    else:
        words = f"a number from {lo:g} {'up to (not including)' if hi_open else 'to'} {hi:g}"

    def ok(v: float) -> bool:  # isfinite: TOML has nan and inf
        above, below = (v > lo if lo_open else v >= lo), (v < hi if hi_open else v <= hi)
        return math.isfinite(v) and above and below

    return kind(words, (int, float), ok, float)


def text(words: str = "a non-empty string", pattern: str | None = None) -> Kind:
    regex = re.compile(pattern) if pattern else None
    return kind(words, (str,), lambda v: v and (regex is None or regex.fullmatch(v)))


def choice(*options: str) -> Kind:
    return kind("one of " + ", ".join(f'"{o}"' for o in options), (str,), lambda v: v in options)


def path(socket: bool = False) -> Kind:
    """A path, relative to the config file's folder; a socket's must fit sun_path."""
    limit, what = (
        (MAX_UNIX_SOCKET_PATH_BYTES, "a Unix socket path")
        if socket
        else (
            MAX_PATH_BYTES,
            "a path",
        )
    )

    def resolve(value: object, ctx: Ctx) -> Path:
        # normpath folds "conf/../run" so paths read well in messages; a path is taken as written
        # (no symlinks resolved), as the owner wrote it.
        resolved = Path(os.path.normpath(ctx.base_dir / str(value)))
        size = len(os.fsencode(resolved))
        if size > limit:
            got = f"{show(str(resolved))} ({size} bytes)"
            raise Bad(got, f"{what} of at most {limit} bytes once resolved")
        return resolved

    plain = text("a non-empty path string (relative to the config file's folder)", r"[^\0]+")
    return Kind(plain.expected, lambda v, ctx: resolve(plain.convert(v, ctx), ctx), resolve)


def list_of(item: Kind, words: str, *, unique: bool = False, nonempty: bool = True) -> Kind:
    def convert(value: object, ctx: Ctx) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Bad(type_name(value))
        try:
            items = tuple(item.convert(v, ctx) for v in value)
        except Bad:
            raise Bad(show(value)) from None
        if (nonempty and not items) or (unique and len(set(items)) != len(items)):
            raise Bad(show(value))
        return items

    return Kind(words, convert)


def _not_json(table: dict[str, Any]) -> str | None:
    """What keeps `table` from being JSON that orjson writes and the server reads, or None.

    Walked with a stack, not recursion: the depth is what is being checked.
    """
    stack: list[tuple[object, str, int]] = [(table, "", 1)]
    while stack:
        value, where, depth = stack.pop()
        at = clip(where[:-1]) if where else "the top"
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"tables or arrays nested more than {MAX_JSON_DEPTH} deep, at {at}"
            pairs = value.items() if isinstance(value, dict) else enumerate(value)
            stack += [(v, f"{where}{k}.", depth + 1) for k, v in reversed(list(pairs))]
        elif isinstance(value, datetime.date | datetime.time):
            return f"a {type_name(value)} at {at}"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{value} at {at}"
        elif isinstance(value, int) and value not in _JSON_INTEGERS:
            return f"an integer beyond 64 bits at {at}"
    return None


def _json_table(value: object, _ctx: Ctx) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Bad(type_name(value))
    if problem := _not_json(value):
        raise Bad(problem)
    return value


MS = integer(1, MAX_MS, "milliseconds, at most one day")
TOKENS = integer(1, MAX_TOKENS, "tokens")
BYTES = integer(1, MAX_BYTES, "bytes, at most 1 GiB")
BOOL = kind("true or false", (bool,))
TEXT = text()
JSON_TABLE = Kind(
    f"a table that is a JSON object (no dates, times, nan or inf in it; numbers within 64 bits; "
    f"nested at most {MAX_JSON_DEPTH} deep)",
    _json_table,
)
PATH = path()
SOCKET = path(socket=True)
SLOT_IDS = list_of(
    integer(0, MAX_SLOTS - 1),
    f"a non-empty list of unique integers from 0 to {MAX_SLOTS - 1} (slot ids)",
    unique=True,
)
DELAYS_MS = list_of(
    integer(0, MAX_MS),
    f"a list of integers from 0 to {MAX_MS} (milliseconds, at most one day)",
    nonempty=False,
)
UIDS = list_of(integer(1, MAX_UID), "a list of unique uids, not 0", unique=True, nonempty=False)
