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
host), nothing for shell. A host entry may name one port, `host:port` or `[v6]:port`
(targets.host_port): then it covers that port only, and beats an entry of the host without a
port (which covers every port). A tool whose row allows it may say `class` (today only "public").

An MCP tool (`<server>.<tool>`, GrantKind.ARGS) takes nothing (the rule covers every call) or
`args`, constraints on named string arguments, each `{ paths = [...] }` (prefixes inside the
workspace, as for the path tools) or `{ hosts = [...] }` (exact hosts, as for fetch, no "*"):

    [[grant]]
    tool = "git.git_log"
    mode = "allow"
    args = { repo_path = { paths = ["repo"] } }

The rule applies to a call only when every named argument is there and satisfies its
constraint (policy.py; a value that cannot be normalised satisfies a deny's, never another's).

The verdict on one call is policy.py's; "always" amendments are amend.py's.
"""

from __future__ import annotations

import enum
import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from boxmaker._toml import toml_array_item
from boxmaker.brokerd.targets import BadTarget, Fields, HostPort, host_port
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
class ArgRule:
    """One argument constraint of an MCP tool's rule: its `paths` prefixes or its `hosts`."""

    field: str
    paths: tuple[tuple[str, ...], ...] = ()
    hosts: tuple[str, ...] = ()

    def depth(self, target: Fields, deny: bool) -> int:
        """How specifically the call's argument meets it (a longer prefix is more specific);
        -1: it does not. Missing: never met. Not normalisable (or not a string): met by a deny
        only."""
        present, value = target.get(self.field)
        if not present:
            return -1
        norm = None if value is None else value.path if self.paths else value.host
        if norm is None:
            return 0 if deny else -1
        if isinstance(norm, tuple):
            return max((len(p) for p in self.paths if norm[: len(p)] == p), default=-1)
        return 0 if _host_depth(self.hosts, norm, deny) > 0 else -1

    def shown(self) -> str:
        if self.paths:
            return f"{self.field} under " + " or ".join("/".join(p) or "." for p in self.paths)
        return f"{self.field} on " + " or ".join(self.hosts)

    def to_json(self) -> dict[str, list[str]]:
        if self.paths:
            return {"paths": ["/".join(p) for p in self.paths]}
        return {"hosts": list(self.hosts)}


@dataclass(frozen=True, slots=True)
class Rule:  # hashable: the verdict keys a dict by rule
    tool: str
    mode: Mode
    grant: GrantKind = GrantKind.NONE
    paths: tuple[tuple[str, ...], ...] = ()  # PATHS: component prefixes; () = none
    files: tuple[str, ...] = ()  # PATHS: exact files ("a/b"); NAMES: the names
    hosts: tuple[str, ...] = ()  # HOSTS: exact normalised hosts, or ANY_HOST
    class_: str = "public"
    args: tuple[ArgRule, ...] = ()  # ARGS: the constraints, all to be met; () = every call

    def covers(self, name: str, target: Target) -> int:
        """How specific the match with `target` is (an exact file beats every prefix; for an
        MCP tool each constraint met adds one, plus its prefix's length); -1 for no match."""
        if name != self.tool:
            return -1
        if self.grant is GrantKind.NONE:
            return 0
        if self.grant is GrantKind.ARGS:
            if not isinstance(target, Fields):
                return -1
            depths = [a.depth(target, self.mode is Mode.DENY) for a in self.args]
            return -1 if any(d < 0 for d in depths) else sum(d + 1 for d in depths)
        if self.grant is GrantKind.HOSTS:
            if not isinstance(target, HostPort):  # a host alone: its port is not known
                target = HostPort(str(target))
            return _host_depth(self.hosts, target, self.mode is Mode.DENY)
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
        """The rule as the grants file holds it (boxmaker/_toml.py, the one TOML writer)."""
        table: dict[str, Any] = {"tool": self.tool, "mode": str(self.mode)}
        keys: dict[str, list[str]] = {
            "paths": ["/".join(p) for p in self.paths],
            "files": list(self.files),
            "hosts": list(self.hosts),
        }
        table |= {k: v for k, v in keys.items() if v}
        if self.args:  # an inline table of inline tables
            table["args"] = {a.field: a.to_json() for a in self.args}
        if self.class_ != "public":
            table["class"] = self.class_
        return toml_array_item("grant", table)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "tool": self.tool,
            "mode": str(self.mode),
            "paths": ["/".join(p) for p in self.paths],
            "files": list(self.files),
            "hosts": list(self.hosts),
            "class": self.class_,
        }
        if self.args:  # only then: a grant record of brokerd's own tools keeps its bytes
            obj["args"] = {a.field: a.to_json() for a in self.args}
        return obj


@functools.lru_cache(maxsize=1024)
def _entry(text: str) -> HostPort:
    return host_port(text)  # a rule's entries are already in this form: it cannot raise


def _host_depth(hosts: tuple[str, ...], target: HostPort, deny: bool) -> int:
    """How specifically host entries cover `target`: 2 an entry naming its host and its port,
    1 its host on every port, 0 "*", -1 none. A target whose port is not known meets an
    entry's port only when the entry denies (the port it will reach may be that one)."""
    best = -1
    for text in hosts:
        if text == ANY_HOST:
            best = max(best, 0)
            continue
        entry = _entry(text)
        if entry.host != target.host:
            continue
        if entry.port is None:
            best = max(best, 1)
        elif entry.port == target.port or (deny and target.port is None):
            best = 2
    return best


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
        return str(host_port(text))
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
    keys = {
        GrantKind.PATHS: {"paths", "files"},
        GrantKind.NAMES: {"files"},
        GrantKind.HOSTS: {"hosts"},
        GrantKind.ARGS: {"args"},
    }.get(tool.grant, set())
    known = {"tool", "mode"} | keys | ({"class"} if tool.classes else set())
    if unknown := sorted(obj.keys() - known - {""}):
        raise GrantsError(f"{where}: unknown key(s) {', '.join(unknown)} for {tool.name}")
    class_ = obj.get("class", "public")
    if class_ not in CLASSES:
        raise GrantsError(f"{where}: class must be one of {', '.join(CLASSES)}, got {class_!r}")
    m, g = Mode(mode), tool.grant
    if g is GrantKind.NONE:
        return Rule(tool.name, m, g, class_=class_)
    if g is GrantKind.ARGS:
        args = _arg_rules(obj["args"], tool, f"{where}.args") if "args" in obj else ()
        return Rule(tool.name, m, g, class_=class_, args=args)
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


_ARGS_SHAPE = (
    'write args = { <argument> = { paths = ["folder"] } } or { hosts = ["name", "name:port"] }'
)


def _arg_rules(table: Any, tool: Tool, where: str) -> tuple[ArgRule, ...]:
    """The `args` of an MCP tool's rule: each a string argument the tool's schema has (checked
    once its server was listed: `tool.strings`), with one non-empty constraint."""
    if not isinstance(table, dict) or not table:
        raise GrantsError(f"{where}: {_ARGS_SHAPE}")
    rules = []
    for field, spec in sorted(table.items()):
        at = f"{where}.{field}"
        if tool.strings is not None and field not in tool.strings:
            has = ", ".join(sorted(tool.strings)) or "none"
            raise GrantsError(
                f"{at}: {tool.name} has no string argument {field!r} (its string arguments: "
                f"{has}); a constraint names one of them"
            )
        if not isinstance(spec, dict) or len(spec) != 1 or not spec.keys() <= {"paths", "hosts"}:
            raise GrantsError(f"{at}: expected exactly one of paths or hosts; {_ARGS_SHAPE}")
        ((key, values),) = spec.items()
        if not isinstance(values, list) or not values:
            raise GrantsError(f"{at}.{key}: must be a non-empty list")
        if key == "paths":
            paths = tuple(_prefix(p, f"{at}.paths") for p in values)
            rules.append(ArgRule(field, paths=paths))
            continue
        if ANY_HOST in values:
            raise GrantsError(f"{at}.hosts: no '*': leave {field} out to cover every host")
        rules.append(ArgRule(field, hosts=tuple(_host(h, at) for h in values)))
    return tuple(rules)


def parse_grants(data: bytes, table: Lookup) -> tuple[Rule, ...]:
    """The rules of a grants file.

    Raises:
        GrantsError: not TOML, a key other than `grant`, or a rule that breaks the format.
    """
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise GrantsError(f"not a TOML file: {exc}") from None
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise GrantsError(
            "not a TOML file brokerd reads: arrays or tables nested too deep"
        ) from None
    if extra := sorted(doc.keys() - {"grant"}):
        raise GrantsError(f"unknown key(s) {', '.join(extra)}; a grants file holds [[grant]] rules")
    rules = doc.get("grant", [])
    if not isinstance(rules, list):
        raise GrantsError("grant: write each rule as [[grant]]")
    return tuple(rule_of(r, f"grant {i + 1}", table) for i, r in enumerate(rules))
