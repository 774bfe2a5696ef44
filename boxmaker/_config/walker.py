"""The config walker (loopd's, gatewayd's, brokerd's): a TOML table read against its sections.

A key is `name: Annotated[type, Kind, "what it is" (optional), Env(...) (optional)] = default`;
without a default it is required. A field whose type is a dataclass is a sub-table. `build` reads
every section the same way, so a new key is one line in its config module and gets every rule:
unknown keys are errors at any level (with a hint), a key with no default is required, defaults pass
through their kind's `finish_default`, and a section's `_relations()` checks its keys against each
other. Every error is one `ConfigError` naming the file and the dotted key. A field whose metadata
is NOT_A_KEY is no key of the file (the caller fills it in after the walk).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import tomllib
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boxmaker._config.kinds import Bad, ConfigError, Ctx, Env, Kind, clip, show, type_name

NOT_A_KEY = {"config_key": False}  # field(metadata=NOT_A_KEY): not read from the file


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
        if f.metadata.get("config_key", True) is False:
            continue
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


def _places(name: str, cls: type, where: str = "") -> Iterator[str]:
    """The sections under `cls` that have a key called `name`, for the hint on an unknown key."""
    for key_name, k in _schema(cls).items():
        if k.section is not None:
            yield from _places(name, k.section, _dotted(where, key_name))
        elif key_name == name:
            yield where


def _unknown(name: str, value: object, where: str, cls: type, root: type, ctx: Ctx) -> ConfigError:
    dotted = _dotted(where, clip(name))
    known = list(_schema(cls))
    places = [p for p in _places(name, root) if p != where]
    close = difflib.get_close_matches(name, known, n=1) if len(name) <= 80 else []
    if places:
        hint = f"; {name} is a key of " + ", ".join(
            f"[{p}]" if p else "the top level" for p in places
        )
    elif close:
        hint = f"; did you mean {_dotted(where, close[0])}?"
    else:
        hint = f"; known here: {', '.join(known)}"
    what = f"section [{dotted}]" if isinstance(value, dict) else f"key {dotted}"
    return ConfigError(ctx.source, dotted, f"unknown {what}{hint}")


def _value(k: _Key, name: str, table: Mapping[str, object], dotted: str, ctx: Ctx) -> object:
    """The key's value: from the table, else its variable, else its default; raises Bad."""
    assert k.kind is not None
    default, factory = k.field.default, k.field.default_factory
    if name in table:
        return k.kind.convert(table[name], ctx)
    if k.env and (value := ctx.env.get(k.env)):
        if not Path(value).is_absolute():
            raise Bad(show(value), "an absolute path")
        return k.kind.convert(value, ctx)
    if default is not dataclasses.MISSING:
        return None if default is None else k.kind.finish_default(default, ctx)
    if factory is not dataclasses.MISSING:
        return factory()
    return dataclasses.MISSING


def build(
    cls: type, table: Mapping[str, object], ctx: Ctx, where: str = "", root: Any = None
) -> Any:
    """The `cls` section (a frozen dataclass) from its TOML table, sub-tables included.

    Raises:
        ConfigError: an unknown key, a wrong value, a missing required key, a broken relation.
    """
    root = cls if root is None else root
    schema = _schema(cls)
    for name in table:
        if name not in schema:
            raise _unknown(name, table[name], where, cls, root, ctx)
    values: dict[str, object] = {}
    missing: list[str] = []
    for name, k in schema.items():
        dotted = _dotted(where, name)
        if k.section is not None:
            raw = table.get(name, {})
            if not isinstance(raw, dict):
                msg = f"{dotted} must be a table ([{dotted}]), got {type_name(raw)}"
                raise ConfigError(ctx.source, dotted, msg)
            values[name] = build(k.section, raw, ctx, dotted, root)
            continue
        assert k.kind is not None
        try:
            value = _value(k, name, table, dotted, ctx)
        except Bad as bad:
            from_env = name not in table and k.env and ctx.env.get(k.env)
            origin = f"{dotted} (unset, so taken from ${k.env})" if from_env else dotted
            msg = f"{origin} must be {bad.expected or k.kind.expected}, got {bad.got}"
            raise ConfigError(ctx.source, dotted, msg) from None
        if value is dataclasses.MISSING:
            missing.append(f"{dotted} ({k.doc})" if k.doc else dotted)
        else:
            values[name] = value
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


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """The TOML text as a table.

    Raises:
        ConfigError: not TOML, not UTF-8 (a str with lone surrogates), or nested too deep to
            parse (tomllib recurses once per level: 50,000 `[` would be a RecursionError).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (character {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"not valid TOML: {exc}") from None
    except RecursionError:
        # Raised with the stack unwound, so a message can be built; the bound depends on how
        # deep the caller already is (about 300 levels from a fresh stack).
        raise ConfigError(source, None, "not valid TOML: nested too deeply to parse") from None


def check_fields(obj: object, what: str) -> None:
    """Checks a section made in code (not read from a file) against its keys' kinds: the bounds
    are the config's, written once.

    Raises:
        ValueError: `{what} {key} = {value}: give {expected}` for the first key out of bounds.
    """
    ctx = Ctx(what, Path("."), {})
    cls: type = type(obj)
    for name, k in _schema(cls).items():
        value = getattr(obj, name)
        if k.kind is None or value is None:
            continue
        try:
            k.kind.convert(value, ctx)
        except Bad:
            raise ValueError(f"{what} {name} = {value!r}: give {k.kind.expected}") from None


def bounds(cls: type, name: str) -> tuple[int, int]:
    """The (minimum, maximum) of the integer key `name` of the section `cls`."""
    kind = _schema(cls)[name].kind
    assert kind is not None, f"{cls.__name__}.{name} is a section"
    assert kind.bounds is not None, f"{cls.__name__}.{name} has no bounds"
    return kind.bounds


def context(source: str, base_dir: str | Path) -> Ctx:
    """The walk's context for a file named `source` in the folder `base_dir`, no environment."""
    return Ctx(source, Path(base_dir), {})
