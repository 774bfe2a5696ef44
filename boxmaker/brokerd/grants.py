"""The owner's grants and the decision on one call: allow, ask or deny, with a reason. [core]

A grants file is TOML, a list of rules:

    [[grant]]
    tool = "write_file"     # the tool's own name: never call_tool, never a wrapper
    mode = "ask"            # allow | ask | deny
    paths = ["notes/"]      # file tools: path prefixes inside the workspace ("" = all of it)

`note` rules take `files = ["notes"]` or `["core"]` instead of paths. `fetch` rules take `hosts`
(exact host names, or IP addresses, or "*" for any host; lower case), `shell` rules nothing (a
command is never matched as a string: it runs in the sandbox). Both may say `class` (the class
of their results; today only "public"). A host that no fetch rule covers is `ask`, not deny (the
issue's default); an IP address named in a fetch rule that is not deny is also the only way
fetch reaches a loopback, private or link-local address (`allowed_addresses`).

Decisions are made on the tool's name and its PARSED arguments, never on a string: a path is
split into components and matched component by component, so "docs" covers "docs/a.md" but not
"docs-old/a.md".

The order of rules never matters: a covering `deny` always wins; otherwise the most specific
covering rule decides (the longest path prefix; on a tie the stricter, ask over allow), so the
exact-path `allow` an "always" answer adds beats a broader `ask`. No rule for the tool: deny ("no
grant"). Rules for the tool, none covering this path: deny. Writing memory/core.md (`note` with
file "core") is never better than ask, so "always" adds nothing there.
"""

from __future__ import annotations

import contextlib
import enum
import ipaddress
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from boxmaker.proto.hash import sha256_hex

MAX_PATH_BYTES = 4095  # Linux's PATH_MAX less the NUL
MAX_NAME_BYTES = 255  # NAME_MAX
PATH_TOOLS = ("read_file", "list_dir", "write_file", "edit_file")
NOTE_FILES = ("notes", "core")
TOOLS = (*PATH_TOOLS, "note", "shell", "fetch")
ANY_HOST = "*"
CLASSES = ("public",)  # proto.ResultClass's values


class Mode(enum.StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


_STRICTNESS = {Mode.ALLOW: 0, Mode.ASK: 1, Mode.DENY: 2}


class GrantsError(Exception):
    """The grants file cannot be used; the message says which rule and why."""


class BadPath(Exception):
    """A path argument that names nothing inside the workspace; the message says why."""


@dataclass(frozen=True, slots=True)
class Rule:  # hashable: decision() keys a dict by rule
    tool: str
    mode: Mode
    paths: tuple[tuple[str, ...], ...] = ()  # component tuples; () = the whole workspace
    files: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()  # fetch: exact hosts, or ANY_HOST
    class_: str = "public"

    def covers(self, tool: str, target: tuple[str, ...] | str) -> int:
        """How many components of the longest prefix that covers `target`; -1 for none."""
        if tool != self.tool:
            return -1
        if tool == "shell":
            return 0
        if tool == "fetch":
            return 1 if target in self.hosts else 0 if ANY_HOST in self.hosts else -1
        if isinstance(target, str):
            return 0 if target in self.files else -1
        return max((len(p) for p in self.paths if target[: len(p)] == p), default=-1)

    def to_toml(self) -> str:
        lines = ["[[grant]]", f'tool = "{self.tool}"', f'mode = "{self.mode}"']
        if self.tool == "note":
            lines.append("files = " + orjson.dumps(list(self.files)).decode())
        elif self.tool == "fetch":
            lines.append("hosts = " + orjson.dumps(list(self.hosts)).decode())
        elif self.tool != "shell":
            lines.append("paths = " + orjson.dumps(["/".join(p) for p in self.paths]).decode())
        if self.class_ != "public":
            lines.append(f'class = "{self.class_}"')
        return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Decision:
    mode: Mode
    reason: str
    class_: str = "public"  # the deciding rule's: the class the result carries


def split_path(path: str, workspace: str) -> tuple[str, ...]:
    """A path argument as components relative to the workspace, checked lexically.

    An absolute path is accepted only when it lies under `workspace`. `.` and empty components
    are dropped; `..` is refused (the kernel refuses it too, beneath the workspace: this is the
    clear message). Control characters (a newline in a name) are refused so that no name can
    forge a line in a summary or a log.

    Raises:
        BadPath: with the reason.
    """
    if "\0" in path:
        raise BadPath("the path holds a NUL byte")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in path):
        raise BadPath(
            "the path holds a control character (a newline?); names like that are refused"
        )
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise BadPath(f"the path is {size} bytes; at most {MAX_PATH_BYTES}")
    if path.startswith("/"):
        root = workspace.rstrip("/") + "/"
        if path != workspace.rstrip("/") and not path.startswith(root):
            raise BadPath(f"{path} is outside the workspace {workspace}; give a path inside it")
        path = path[len(root) :] if path.startswith(root) else ""
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise BadPath("'..' is not allowed in a path: paths stay inside the workspace")
    for p in parts:
        if len(p.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise BadPath(f"a name in the path is over {MAX_NAME_BYTES} bytes")
    return parts


def _prefix(text: Any, where: str) -> tuple[str, ...]:
    if not isinstance(text, str) or text.startswith("/"):
        raise GrantsError(f"{where}: a path prefix is a relative string, got {text!r}")
    parts = tuple(p for p in text.split("/") if p not in ("", "."))
    if ".." in parts:
        raise GrantsError(f"{where}: '..' in a path prefix; prefixes stay inside the workspace")
    return parts


def _rule(obj: Any, where: str) -> Rule:
    if not isinstance(obj, dict):
        raise GrantsError(f"{where}: expected a table")
    tool, mode = obj.get("tool"), obj.get("mode")
    if tool not in TOOLS:
        raise GrantsError(f"{where}: tool must be one of {', '.join(TOOLS)}, got {tool!r}")
    if mode not in tuple(Mode):
        raise GrantsError(f"{where}: mode must be allow, ask or deny, got {mode!r}")
    field = {"note": "files", "fetch": "hosts", "shell": ""}.get(tool, "paths")
    known = {"tool", "mode", field} | ({"class"} if tool in ("shell", "fetch") else set())
    if unknown := sorted(obj.keys() - known - {""}):
        raise GrantsError(f"{where}: unknown key(s) {', '.join(unknown)} for {tool}")
    class_ = obj.get("class", "public")
    if class_ not in CLASSES:
        raise GrantsError(f"{where}: class must be one of {', '.join(CLASSES)}, got {class_!r}")
    if tool == "shell":
        return Rule(tool, Mode(mode), class_=class_)
    if tool == "fetch":
        hosts = obj.get("hosts", [ANY_HOST])
        if not isinstance(hosts, list) or not hosts:
            raise GrantsError(f"{where}: hosts must be a non-empty list")
        return Rule(tool, Mode(mode), hosts=tuple(_host(h, where) for h in hosts), class_=class_)
    values = obj.get(field, [""] if field == "paths" else list(NOTE_FILES))
    if not isinstance(values, list) or not values:
        raise GrantsError(f"{where}: {field} must be a non-empty list")
    if field == "files":
        if bad := [f for f in values if f not in NOTE_FILES]:
            raise GrantsError(f"{where}: files may hold notes and core, got {bad!r}")
        return Rule(tool, Mode(mode), files=tuple(values))
    return Rule(tool, Mode(mode), paths=tuple(_prefix(p, f"{where}.paths") for p in values))


def _host(text: Any, where: str) -> str:
    if text == ANY_HOST:
        return ANY_HOST
    if not isinstance(text, str) or not text or text != text.lower():
        raise GrantsError(f"{where}.hosts: a host is a lower-case name or address, got {text!r}")
    try:
        return str(ipaddress.ip_address(text.strip("[]")))  # ::1 and [::1] alike
    except ValueError:
        pass
    if any(not (c.isalnum() or c in "-.") for c in text):
        raise GrantsError(f"{where}.hosts: {text!r} is not a host name (no scheme, port or path)")
    return text


def parse_grants(data: bytes) -> tuple[Rule, ...]:
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
    return tuple(_rule(r, f"grant {i + 1}") for i, r in enumerate(rules))


def target_of(tool: str, args: Mapping[str, Any], workspace: str) -> tuple[str, ...] | str:
    """What a rule is matched against: the path's components, note's file, fetch's host (lower
    case, an IP address in its plain form), or "" for shell."""
    if tool == "note":
        return str(args.get("file", "notes"))
    if tool == "shell":
        return ""
    if tool == "fetch":
        return url_host(args["url"])
    return split_path(args["path"], workspace)


def url_host(url: str) -> str:
    """The host a URL names, as grants write it; BadPath when it names none."""
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        raise BadPath(f"not a URL ({exc}); give an http:// or https:// URL") from None
    if not host:
        raise BadPath("the URL names no host; give an http:// or https:// URL")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def decision(rules: Sequence[Rule], tool: str, target: tuple[str, ...] | str) -> Decision:
    """allow, ask or deny for `tool` on `target` (from `target_of`), with the reason."""
    if tool == "fetch" and not any(r.covers(tool, target) >= 0 for r in rules):
        return Decision(Mode.ASK, f"no grant for fetch covers {target}: fetch asks by default")
    if not any(r.tool == tool for r in rules):
        return Decision(Mode.DENY, f"no grant for {tool}: the owner has not granted this tool")
    depth = {r: r.covers(tool, target) for r in rules}
    covering = [r for r, d in depth.items() if d >= 0]
    shown = "/".join(target) or "." if isinstance(target, tuple) else target or "any command"
    if not covering:
        return Decision(Mode.DENY, f"no grant for {tool} covers {shown}")
    if any(r.mode is Mode.DENY for r in covering):
        mode = Mode.DENY  # a deny is never overridden
    else:  # the most specific rule (longest prefix) decides; on a tie, the stricter
        deepest = max(depth[r] for r in covering)
        modes = (r.mode for r in covering if depth[r] == deepest)
        mode = max(modes, key=_STRICTNESS.__getitem__)
    if tool == "note" and target == "core" and mode is Mode.ALLOW:
        return Decision(Mode.ASK, "memory/core.md goes into every baseline: the owner approves")
    deciding = [r for r in covering if r.mode is mode]
    class_ = deciding[0].class_ if deciding else "public"
    return Decision(mode, f"grant: {tool} {mode} on {shown}", class_)


def redirect_refusal(rules: Sequence[Rule], host: str | tuple[str, ...], url: str) -> str | None:
    """Why a fetch of `host` may not follow a redirect to `url`, or None. The same host, or one
    the grants allow: nobody can be asked mid-fetch, so a host that would ask (or is denied)
    ends the fetch, and the model can fetch that URL itself (then the owner is asked)."""
    try:
        to = url_host(url)
    except BadPath as exc:
        return f"a redirect to {url}: {exc}"
    if to == host or decision(rules, "fetch", to).mode is Mode.ALLOW:
        return None
    return f"a redirect to {url}: no grant allows {to}; fetch that URL to be asked about it"


def listed(rules: Sequence[Rule], tool: str) -> bool:
    """Whether find_tool offers `tool`: some rule grants it something other than deny (fetch:
    unless a deny covers every host, since it asks by default)."""
    if tool == "fetch":
        shut = (r for r in rules if r.tool == tool and r.mode is Mode.DENY)
        return not any(ANY_HOST in r.hosts for r in shut)
    return any(r.tool == tool and r.mode is not Mode.DENY for r in rules)


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def allowed_addresses(rules: Sequence[Rule]) -> frozenset[Address]:
    """The addresses fetch may reach though netcheck would refuse them: those a fetch rule that
    is not deny names exactly (a local test server, a box on the LAN)."""
    found: set[Address] = set()
    for r in rules:
        if r.tool == "fetch" and r.mode is not Mode.DENY:
            for h in r.hosts:
                with contextlib.suppress(ValueError):  # a name: netcheck judges what it resolves to
                    found.add(ipaddress.ip_address(h))
    return frozenset(found)


def always_rule(tool: str, target: tuple[str, ...] | str) -> Rule | None:
    """The rule an "always" answer adds: this tool, this exact path (or note file, or fetch's
    host), allow. None for memory/core.md, which is asked about every time, and for shell: an
    "always" would allow every command (the peers' "always allow" that recorded the shell)."""
    if tool == "shell":
        return None
    if tool == "fetch":
        assert isinstance(target, str)
        return Rule(tool, Mode.ALLOW, hosts=(target,))
    if isinstance(target, str):
        return None if target == "core" else Rule(tool, Mode.ALLOW, files=(target,))
    return Rule(tool, Mode.ALLOW, paths=(target,))


def canonical_args(args: Mapping[str, Any]) -> str:
    return orjson.dumps(dict(args), option=orjson.OPT_SORT_KEYS).decode()


def call_hash(tool: str, args: Mapping[str, Any]) -> str:
    """What an approval is bound to: the tool's name and its canonical arguments."""
    return sha256_hex(f"{tool}\n{canonical_args(args)}".encode())
