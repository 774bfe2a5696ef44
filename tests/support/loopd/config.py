"""loopd config texts for the config tests: the required keys, a text from sections, a key set."""

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from boxmaker.loopd.config import (
    Config,
    ConfigError,
    parse_config,
)

SHA = "ab" * 32


BASE = Path("/srv/bx/conf")


REQUIRED = {
    "inference": 'socket = "infer.sock"\nmodel = "smol"\n',
    "expect": f'chat_template_sha256 = "{SHA}"\nn_ctx = 4096\ntotal_slots = 2\n',
}


def text(**sections: str) -> str:
    """A config text: the required keys plus extra lines per section (`inference_sampling=...`)."""
    parts = dict(REQUIRED)
    for name, lines in sections.items():
        name = name.replace("_", ".") if name == "inference_sampling" else name
        parts[name] = parts.get(name, "") + lines + "\n"
    return "".join(f"[{name}]\n{body}\n" for name, body in parts.items())


def parse(content: str, env: dict[str, str] | None = None) -> Config:
    return parse_config(content, "conf/loopd.toml", BASE, env or {})


def error(content: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(content, env)
    assert str(info.value).startswith("conf/loopd.toml: "), str(info.value)
    return info.value


def leaf_keys(cls: type = Config, where: str = "") -> list[str]:
    """Every dotted key the schema knows, walked from the dataclasses."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        dotted = f"{where}.{f.name}" if where else f.name
        sub = hints[f.name]
        is_section = isinstance(sub, type) and dataclasses.is_dataclass(sub)
        keys.extend(leaf_keys(sub, dotted) if is_section else [dotted])
    return keys


def set_key(dotted: str, value: str) -> str:
    """A config text with `dotted` set to the TOML `value` (the required keys kept otherwise)."""
    section, name = dotted.rsplit(".", 1)
    if section == "inference.sampling":
        return text(inference_sampling=f"{name} = {value}")
    base = {k: v for k, v in REQUIRED.items()}
    if section in base:
        base[section] = re.sub(rf"(?m)^{name} = .*\n", "", base[section])
    base[section] = base.get(section, "") + f"{name} = {value}\n"
    return "".join(f"[{s}]\n{body}\n" for s, body in base.items())
