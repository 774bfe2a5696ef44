"""loopd's config file (`loopd.toml`): TOML text into frozen, typed dataclasses.

Each key is declared once, `name: Annotated[type, Kind] = default`; its `Kind` says in words what
the value must be, and checks and converts it. One walker (`_build`) reads every section against
its dataclass, so a new key is one line and gets every rule: unknown keys are errors at any level;
types are exact (a bool is not an integer, nor is a float; an integer is a fine float); a key with
no default is required; relative paths resolve against the file's folder; `_relations` checks keys
against each other. An error is one `ConfigError` naming the file, the dotted key and what was
expected. `parse_config` is a core (no I/O, the environment is a parameter); `load_config` reads.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import functools
import math
import os
import re
import tomllib
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

# Linux's sun_path is 108 bytes including the terminating NUL.
MAX_UNIX_SOCKET_PATH_BYTES = 107


class ConfigError(Exception):
    """The file is missing, unreadable, not TOML, or has a wrong key: `key` (dotted) or None."""

    def __init__(self, source: str, key: str | None, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.key = key


@dataclass(frozen=True, slots=True)
class _Ctx:
    source: str
    base_dir: Path
    env: Mapping[str, str]


class _Bad(Exception):
    """Raised by a Kind: `got` describes the value; `expected` overrides the kind's words."""

    def __init__(self, got: str, expected: str | None = None) -> None:
        super().__init__(got)
        self.got = got
        self.expected = expected


@dataclass(frozen=True, slots=True)
class Kind:
    """What a key's value must be: `expected` in words, `convert` checks it (raises _Bad)."""

    expected: str
    convert: Callable[[object, _Ctx], object]
    # Applied to a default that was not in the file (paths resolve against the config's folder).
    finish_default: Callable[[object, _Ctx], object] = lambda value, _ctx: value


def _type_name(value: object) -> str:
    # tomllib gives exact types, so a bool is looked up as bool, never as int.
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    names |= {dict: "table", datetime.datetime: "datetime", datetime.date: "date"}
    return names.get(type(value), "time" if isinstance(value, datetime.time) else "value")


def _show(value: object) -> str:
    text = f'"{value}"' if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(
    expected: str,
    accepts: tuple[type, ...],
    ok: Callable[[Any], object] = lambda _value: True,
    convert: Callable[[Any], object] = lambda value: value,
) -> Kind:
    """A kind that takes TOML values of the `accepts` types (a bool only if bool is listed) for
    which ok(value) holds, then converts them."""

    def check(value: object, _ctx: _Ctx) -> object:
        if not isinstance(value, accepts) or (isinstance(value, bool) and bool not in accepts):
            raise _Bad(_type_name(value))
        if not ok(value):
            raise _Bad(_show(value))
        return convert(value)

    return Kind(expected, check)


def _integer(minimum: int, unit: str = "", maximum: int | None = None) -> Kind:
    words = {0: "a non-negative integer", 1: "a positive integer"}[minimum]
    if maximum is not None:
        words = f"an integer from {minimum} to {maximum}"
    words += f" ({unit})" if unit else ""
    return _kind(words, (int,), lambda v: minimum <= v and (maximum is None or v <= maximum))


def _number(
    lo: float, hi: float = math.inf, *, lo_open: bool = False, hi_open: bool = False
) -> Kind:
    if hi == math.inf:
        words = f"a number {'>' if lo_open else '>='} {lo:g}"
    else:
        words = f"a number from {lo:g} {'up to (not including)' if hi_open else 'to'} {hi:g}"

    def ok(v: float) -> bool:  # isfinite: TOML has nan and inf
        above, below = (v > lo if lo_open else v >= lo), (v < hi if hi_open else v <= hi)
        return math.isfinite(v) and above and below

    return _kind(words, (int, float), ok, float)  # an integer is accepted where a float is expected


def _text(words: str = "a non-empty string", pattern: str | None = None) -> Kind:
    regex = re.compile(pattern) if pattern else None
    return _kind(words, (str,), lambda v: v and (regex is None or regex.fullmatch(v)))


def _choice(*options: str) -> Kind:
    return _kind("one of " + ", ".join(f'"{o}"' for o in options), (str,), lambda v: v in options)


def _path(socket: bool = False) -> Kind:
    def resolve(value: object, ctx: _Ctx) -> Path:
        # normpath folds "conf/../run" so paths read well in messages; a path is taken as written
        # (no symlinks resolved), as the owner wrote it.
        path = Path(os.path.normpath(ctx.base_dir / str(value)))
        size = len(os.fsencode(path))
        if socket and size > MAX_UNIX_SOCKET_PATH_BYTES:
            limit = f"a Unix socket path of at most {MAX_UNIX_SOCKET_PATH_BYTES} bytes"
            raise _Bad(f"{path} ({size} bytes)", f"{limit} once resolved")
        return path

    text = _text("a non-empty path string (relative to the config file's folder)", r"[^\0]+")
    return Kind(text.expected, lambda v, ctx: resolve(text.convert(v, ctx), ctx), resolve)


def _list(item: Kind, words: str, *, unique: bool = False, nonempty: bool = True) -> Kind:
    def convert(value: object, ctx: _Ctx) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise _Bad(_type_name(value))
        try:
            items = tuple(item.convert(v, ctx) for v in value)
        except _Bad:
            raise _Bad(_show(value)) from None
        if (nonempty and not items) or (unique and len(set(items)) != len(items)):
            raise _Bad(_show(value))
        return items

    return Kind(words, convert)


def _no_dates(value: Any, where: str = "") -> Any:
    """Returns a table unchanged if it is JSON; TOML's dates and times are not."""
    if isinstance(value, dict | list):
        for k, v in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(v, datetime.date | datetime.time):
                raise _Bad(f"a {_type_name(v)} at {where}{k}")
            _no_dates(v, f"{where}{k}.")
    return value


MS = _integer(1, "milliseconds")
TOKENS = _integer(1, "tokens")
BYTES = _integer(1, "bytes")
BOOL = _kind("true or false", (bool,))
TEXT = _text()
JSON_TABLE = _kind(
    "a table that is a JSON object (no dates or times in it)", (dict,), convert=_no_dates
)
PATH = _path()
SOCKET = _path(socket=True)
SLOT_IDS = _list(
    _integer(0), "a non-empty list of unique non-negative integers (slot ids)", unique=True
)
DELAYS_MS = _list(_integer(0), "a list of non-negative integers (milliseconds)", nonempty=False)


@dataclass(frozen=True, slots=True)
class Env:
    """In a key's Annotated[...]: when the key is absent, this (non-empty) variable is used."""

    name: str


# A key is `name: Annotated[type, Kind, "what it is" (optional), Env(...) (optional)] = default`;
# without a default it is required. A field whose type is a dataclass is a sub-table.


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingConfig:
    """[inference.sampling]: sent to the server only when set (None means "not sent")."""

    temperature: Annotated[float | None, _number(0.0)] = None
    top_p: Annotated[float | None, _number(0.0, 1.0)] = None
    top_k: Annotated[int | None, _integer(0)] = None
    min_p: Annotated[float | None, _number(0.0, 1.0)] = None
    repeat_penalty: Annotated[float | None, _number(0.0, lo_open=True)] = None
    seed: Annotated[int | None, _integer(0, maximum=2**32 - 1)] = None

    def params(self) -> dict[str, float | int]:
        """The settings that are set, by their request field names, in declaration order."""
        pairs = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {name: value for name, value in pairs if value is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceConfig:
    """[inference]: the way to llama-server and every limit of the M2a brief's section 4."""

    socket: Annotated[Path, SOCKET, "the path of infer.sock"]
    model: Annotated[str, TEXT, "the model id sent upstream"]
    slots: Annotated[tuple[int, ...], SLOT_IDS] = (0,)
    poll_ms: Annotated[int, MS] = 5000
    busy_wait_ms: Annotated[int, MS] = 600_000
    load_wait_ms: Annotated[int, MS] = 180_000
    idle_grace_ms: Annotated[int, MS] = 30_000
    liveness_ms: Annotated[int, MS] = 30_000
    thinking_cap: Annotated[int, TOKENS] = 4096
    thinking_overrun: Annotated[int, _integer(0, "tokens")] = 256
    max_tokens: Annotated[int, TOKENS] = 8192
    queue_length: Annotated[int, _integer(0, "requests waiting per slot")] = 8
    retry_attempts: Annotated[int, _integer(1, "attempts in all, the first included")] = 4
    retry_delays_ms: Annotated[tuple[int, ...], DELAYS_MS] = (2000, 8000, 30_000)
    retry_jitter: Annotated[float, _number(0.0, 1.0, hi_open=True)] = 0.25
    retry_total_ms: Annotated[int, MS] = 300_000
    max_header_bytes: Annotated[int, BYTES] = 16_384
    max_sse_line_bytes: Annotated[int, BYTES] = 1_048_576
    max_body_bytes: Annotated[int, BYTES] = 4_194_304
    control_timeout_ms: Annotated[int, MS] = 5000
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def _relations(self) -> Iterator[tuple[str, str]]:
        waits = self.retry_attempts - 1
        if len(self.retry_delays_ms) != waits:
            yield (
                "retry_delays_ms",
                (
                    f"must hold one wait before each retry: retry_attempts = {self.retry_attempts} "
                    f"needs {waits}, got {len(self.retry_delays_ms)}"
                ),
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpectConfig:
    """[expect]: what the self-test requires of the server's /props."""

    chat_template_sha256: Annotated[
        str,
        _text("64 lowercase hex digits", r"[0-9a-f]{64}"),
        "the SHA-256 of /props chat_template",
    ]
    n_ctx: Annotated[int, TOKENS, "the per-slot context size"]
    total_slots: Annotated[int, _integer(1), "the server's slot count"]


_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "timezone": {"type": "string", "description": "An IANA time zone name, e.g. Europe/Paris."}
    },
    "required": ["timezone"],
}
_TOOL_NAME = _text("a tool name of 1 to 64 letters, digits, _ or -", r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SelftestConfig:
    """[selftest]: what the tool-call and cache checks send; the defaults force nothing."""

    prompt: Annotated[str, TEXT] = (
        "What time is it in Europe/Paris right now? Use the get_time tool."
    )
    tool_name: Annotated[str, _TOOL_NAME] = "get_time"
    tool_description: Annotated[str, TEXT] = "Returns the current time in a time zone."
    # A JSON schema. A dict can't be frozen or hashed: it is left out of hash(); don't mutate it.
    tool_parameters: Annotated[dict[str, Any], JSON_TABLE] = field(
        default_factory=lambda: copy.deepcopy(_TOOL_PARAMETERS), hash=False
    )
    # "none" is left out: with it the tool-call check could never pass.
    tool_choice: Annotated[str, _choice("auto", "required")] = "auto"
    prefill: Annotated[str | None, TEXT] = None
    stop: Annotated[
        tuple[str, ...] | None, _list(TEXT, "a non-empty list of non-empty strings")
    ] = None
    temperature: Annotated[float, _number(0.0)] = 0.0
    parallel_tool_calls: Annotated[bool | None, BOOL] = None
    cache_first_prompt: Annotated[str, TEXT] = "Name the three primary colours, in one line."
    cache_second_prompt: Annotated[str, TEXT] = "Now name the three secondary colours, in one line."


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelConfig:
    """[channel]: where loopd listens for bxctl."""

    socket: Annotated[Path, SOCKET] = Path("/run/loop/loop.sock")


@dataclass(frozen=True, slots=True, kw_only=True)
class PathsConfig:
    """[paths]: where sessions live."""

    home: Annotated[Path, PATH, Env("BOXMAKER_HOME")] = Path("/var/lib/boxmaker")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig:
    """[loop]: the turn loop's limits (M2b brief section 3)."""

    tool_iterations: Annotated[int, _integer(1, "tool rounds per turn")] = 8
    repeat_detection: Annotated[bool, BOOL] = True
    tool_result_cap: Annotated[int, BYTES] = 16_384
    parallel_tools: Annotated[bool, BOOL] = True
    tool_timeout_ms: Annotated[int, MS] = 30_000


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselineConfig:
    """[baseline]: the system prompt file."""

    system: Annotated[Path, PATH] = Path("system.md")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The whole file. [inference] and [expect] are required; the other sections are optional."""

    inference: InferenceConfig
    expect: ExpectConfig
    selftest: SelftestConfig = field(default_factory=SelftestConfig)
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    baseline: BaselineConfig = field(default_factory=BaselineConfig)

    def _relations(self) -> Iterator[tuple[str, str]]:
        total = self.expect.total_slots
        if outside := [slot for slot in self.inference.slots if slot >= total]:
            ids = f"means slot ids 0 to {total - 1}"
            yield (
                "inference.slots",
                f"holds slot {outside[0]}, but expect.total_slots = {total} {ids}",
            )


@dataclass(frozen=True, slots=True)
class _Key:  # one field of a section, read off its annotation
    field: dataclasses.Field[Any]
    kind: Kind | None  # None for a sub-table
    section: type | None
    doc: str
    env: str | None


@functools.cache
def _schema(cls: type) -> dict[str, _Key]:
    hints = typing.get_type_hints(cls, include_extras=True)
    keys = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        extras = getattr(hint, "__metadata__", ())  # set on Annotated[...] only
        kind = next((x for x in extras if isinstance(x, Kind)), None)
        doc = next((x for x in extras if isinstance(x, str)), "")
        env = next((x.name for x in extras if isinstance(x, Env)), None)
        section = hint if kind is None and dataclasses.is_dataclass(hint) else None
        if kind is None and section is None:
            raise TypeError(f"{cls.__name__}.{f.name}: annotate it with a Kind or a section class")
        keys[f.name] = _Key(f, kind, section, doc, env)  # type: ignore[arg-type]
    return keys


def _dotted(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _places(name: str, cls: type = Config, where: str = "") -> Iterator[str]:
    """The sections that have a key called `name`, for the hint on an unknown key."""
    for key_name, k in _schema(cls).items():
        if k.section is not None:
            yield from _places(name, k.section, _dotted(where, key_name))
        elif key_name == name:
            yield where


def _unknown(name: str, value: object, where: str, known: list[str], ctx: _Ctx) -> ConfigError:
    dotted = _dotted(where, name)
    places = [p for p in _places(name) if p != where]
    close = difflib.get_close_matches(name, known, n=1)
    if places:
        hint = f"; {name} is a key of " + ", ".join(f"[{p}]" for p in places)
    elif close:
        hint = f"; did you mean {_dotted(where, close[0])}?"
    else:
        hint = f"; known here: {', '.join(known)}"
    what = f"section [{dotted}]" if isinstance(value, dict) else f"key {dotted}"
    return ConfigError(ctx.source, dotted, f"unknown {what}{hint}")


def _build(cls: type, table: Mapping[str, object], where: str, ctx: _Ctx) -> Any:
    schema = _schema(cls)
    for name in table:
        if name not in schema:
            raise _unknown(name, table[name], where, list(schema), ctx)
    values: dict[str, object] = {}
    missing: list[str] = []
    for name, k in schema.items():
        dotted = _dotted(where, name)
        if k.section is not None:
            raw = table.get(name, {})
            if not isinstance(raw, dict):
                msg = f"{dotted} must be a table ([{dotted}]), got {_type_name(raw)}"
                raise ConfigError(ctx.source, dotted, msg)
            values[name] = _build(k.section, raw, dotted, ctx)
            continue
        assert k.kind is not None
        default, factory, origin = k.field.default, k.field.default_factory, dotted
        try:
            if name in table:
                values[name] = k.kind.convert(table[name], ctx)
            elif k.env and (value := ctx.env.get(k.env)):
                origin = f"{dotted} (unset, so taken from ${k.env})"
                if not Path(value).is_absolute():
                    raise _Bad(_show(value), "an absolute path")
                values[name] = k.kind.convert(value, ctx)
            elif default is not dataclasses.MISSING:
                finish = k.kind.finish_default
                values[name] = None if default is None else finish(default, ctx)
            elif factory is not dataclasses.MISSING:
                values[name] = factory()
            else:
                missing.append(f"{dotted} ({k.doc})" if k.doc else dotted)
        except _Bad as bad:
            msg = f"{origin} must be {bad.expected or k.kind.expected}, got {bad.got}"
            raise ConfigError(ctx.source, dotted, msg) from None
    if missing:
        plural = "s" if len(missing) > 1 else ""
        first = missing[0].split(" ")[0]
        raise ConfigError(ctx.source, first, f"missing required key{plural}: {', '.join(missing)}")
    built = cls(**values)
    relations = getattr(built, "_relations", None)
    for relative, problem in relations() if relations else ():
        dotted = relative if "." in relative else _dotted(where, relative)
        raise ConfigError(ctx.source, dotted, f"{dotted} {problem}")
    return built


def parse_config(
    text: str, source: str, base_dir: Path, env: Mapping[str, str] | None = None
) -> Config:
    """Parses and checks the text of a config file.

    Args:
        text: the file's content.
        source: the file's name as the user gave it; every error message starts with it.
        base_dir: the folder relative paths (and path defaults) are resolved against.
        env: the environment (`BOXMAKER_HOME`); None means an empty one.

    Returns:
        The Config, every key given or defaulted.

    Raises:
        ConfigError: not TOML, an unknown key, a wrong type or value, a missing required key.
    """
    ctx = _Ctx(source, base_dir, env if env is not None else {})
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"not valid TOML: {exc}") from None
    config: Config = _build(Config, table, "", ctx)
    return config


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Reads the config file at `path`; relative paths in it resolve against its folder.

    `env` defaults to `os.environ`. Raises ConfigError naming the file when it is missing,
    unreadable, not UTF-8, or wrong in any way `parse_config` checks.
    """
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        hint = "no such file (conf/loopd.toml.example shows every key)"
        raise ConfigError(source, None, hint) from None
    except OSError as exc:
        raise ConfigError(source, None, f"cannot read it: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (byte {exc.start})") from None
    base_dir = Path(path).absolute().parent
    return parse_config(text, source, base_dir, os.environ if env is None else env)
