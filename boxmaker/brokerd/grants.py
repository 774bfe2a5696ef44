"""The grants file's format: its rules, parsed and written back. [core]

A grants file is TOML, a list of rules:

    [[grant]]
    tool = "write_file"     # the tool's own name: never call_tool, never a wrapper
    mode = "ask"            # allow | ask | deny
    paths = ["notes/"]      # path tools: prefixes inside the workspace ("" = all of it)
    files = ["a/b.md"]      # path tools: exact files (what an "always" adds)

Which key a tool's rules take is the tool's row in the table (tools/table.py, `GrantKind`):
paths and files for the path tools, `files = ["notes"]` or `["core"]` for note, `hosts` for
fetch (names or addresses, normalised as the URL's host is: targets.normal_host; or "*" for any
host), nothing for shell. A tool whose row allows it may say `class` (today only "public").

The verdict on one call is policy.py's; "always" amendments are amend.py's.
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from boxmaker.brokerd.targets import BadTarget, normal_host
from boxmaker.brokerd.tools.kind import GrantKind, Target, Tool

ANY_HOST = "*"
CLASSES = ("public",)  # proto.ResultClass's values


class Lookup(Protocol):
    """The table of tools, as the grants and the verdict read it."""

    def get(self, name: str) -> Tool | None: ...

    def grant_row(self, name: str) -> Tool | None: ...  # get, starting nothing

    def grant_names(self) -> list[str]: ...  # what a rule may name, starting nothing

    def names(self) -> tuple[str, ...]: ...


class Mode(enum.StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class GrantsError(Exception):
    """The grants file cannot be used; the message says which rule and why."""


@dataclass(frozen=True, slots=True)
class Rule:  # hashable: the verdict keys a dict by rule
    tool: str
    mode: Mode
    grant: GrantKind = GrantKind.NONE
    paths: tuple[tuple[str, ...], ...] = ()  # PATHS: component prefixes; () = none
    files: tuple[str, ...] = ()  # PATHS: exact files ("a/b"); NAMES: the names
    hosts: tuple[str, ...] = ()  # HOSTS: exact normalised hosts, or ANY_HOST
    class_: str = "public"

    def covers(self, name: str, target: Target) -> int:
        """How specific the match with `target` is (an exact file beats every prefix); -1 for
        no match."""
        if name != self.tool:
            return -1
        if self.grant is GrantKind.NONE:
            return 0
        if self.grant is GrantKind.HOSTS:
            return 1 if target in self.hosts else 0 if ANY_HOST in self.hosts else -1
        if self.grant is GrantKind.NAMES:
            return 0 if target in self.files else -1
        assert isinstance(target, tuple)
        if "/".join(target) in self.files:
            return len(target) + 1
        if self.mode is Mode.DENY:  # a denied file denies every path through its name too
            below = [f.split("/") for f in self.files]
            if hit := max((len(f) for f in below if list(target[: len(f)]) == f), default=0):
                return hit + 1
        return max((len(p) for p in self.paths if target[: len(p)] == p), default=-1)

    def to_toml(self) -> str:
        lines = ["[[grant]]", f'tool = "{self.tool}"', f'mode = "{self.mode}"']
        keys: dict[str, list[str]] = {
            "paths": ["/".join(p) for p in self.paths],
            "files": list(self.files),
            "hosts": list(self.hosts),
        }
        lines += [f"{k} = {orjson.dumps(v).decode()}" for k, v in keys.items() if v]
        if self.class_ != "public":
            lines.append(f'class = "{self.class_}"')
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "mode": str(self.mode),
            "paths": ["/".join(p) for p in self.paths],
            "files": list(self.files),
            "hosts": list(self.hosts),
            "class": self.class_,
        }


def _prefix(text: Any, where: str) -> tuple[str, ...]:
    if not isinstance(text, str) or text.startswith("/"):
        raise GrantsError(f"{where}: a path is a relative string, got {text!r}")
    parts = tuple(p for p in text.split("/") if p not in ("", "."))
    if ".." in parts:
        raise GrantsError(f"{where}: '..' in a path; grants stay inside the workspace")
    return parts


def _host(text: Any, where: str) -> str:
    if text == ANY_HOST:
        return ANY_HOST
    if not isinstance(text, str):
        raise GrantsError(f"{where}.hosts: a host is a string, got {text!r}")
    try:
        return normal_host(text)
    except BadTarget as exc:
        raise GrantsError(f"{where}.hosts: {exc}") from None


def _list(obj: Mapping[str, Any], key: str, default: list[str], where: str) -> list[Any]:
    values = obj.get(key, default)
    if not isinstance(values, list) or (key in obj and not values):
        raise GrantsError(f"{where}: {key} must be a non-empty list")
    return values


def rule_of(obj: Any, where: str, table: Lookup) -> Rule:
    """One [[grant]] table (or a `grant` record of the log) as a Rule; GrantsError if not."""
    if not isinstance(obj, dict):
        raise GrantsError(f"{where}: expected a table")
    name, mode = obj.get("tool"), obj.get("mode")
    tool = table.grant_row(name) if isinstance(name, str) else None
    if tool is None or not tool.needs_grant:
        names = ", ".join(table.grant_names())
        raise GrantsError(f"{where}: tool must be one of {names}, got {name!r}")
    if mode not in tuple(Mode):
        raise GrantsError(f"{where}: mode must be allow, ask or deny, got {mode!r}")
    keys = {GrantKind.PATHS: {"paths", "files"}, GrantKind.NAMES: {"files"}}.get(
        tool.grant, {"hosts"} if tool.grant is GrantKind.HOSTS else set()
    )
    known = {"tool", "mode"} | keys | ({"class"} if tool.classes else set())
    if unknown := sorted(obj.keys() - known - {""}):
        raise GrantsError(f"{where}: unknown key(s) {', '.join(unknown)} for {tool.name}")
    class_ = obj.get("class", "public")
    if class_ not in CLASSES:
        raise GrantsError(f"{where}: class must be one of {', '.join(CLASSES)}, got {class_!r}")
    m, g = Mode(mode), tool.grant
    if g is GrantKind.NONE:
        return Rule(tool.name, m, g, class_=class_)
    if g is GrantKind.HOSTS:
        hosts = _list(obj, "hosts", [ANY_HOST], where)
        return Rule(tool.name, m, g, hosts=tuple(_host(h, where) for h in hosts), class_=class_)
    if g is GrantKind.NAMES:
        picked = _list(obj, "files", list(tool.names), where)
        if bad := [f for f in picked if f not in tool.names]:
            raise GrantsError(f"{where}: files may hold {' and '.join(tool.names)}, got {bad!r}")
        return Rule(tool.name, m, g, files=tuple(picked), class_=class_)
    files = tuple("/".join(_prefix(f, f"{where}.files")) for f in _list(obj, "files", [], where))
    if "" in files:
        raise GrantsError(f"{where}.files: a file is a path to one file, not the workspace")
    default = [] if files else [""]
    paths = tuple(_prefix(p, f"{where}.paths") for p in _list(obj, "paths", default, where))
    return Rule(tool.name, m, g, paths=paths, files=files, class_=class_)


def parse_grants(data: bytes, table: Lookup) -> tuple[Rule, ...]:
    """The rules of a grants file.

    Raises:
        GrantsError: not TOML, a key other than `grant`, or a rule that breaks the format.
    """
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise GrantsError(f"not a TOML file: {exc}") from None
    if extra := sorted(doc.keys() - {"grant"}):
        raise GrantsError(f"unknown key(s) {', '.join(extra)}; a grants file holds [[grant]] rules")
    rules = doc.get("grant", [])
    if not isinstance(rules, list):
        raise GrantsError("grant: write each rule as [[grant]]")
    return tuple(rule_of(r, f"grant {i + 1}", table) for i, r in enumerate(rules))
