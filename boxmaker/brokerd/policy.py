"""The one verdict: a call's decision from its raw request. [core]

`decide` is the only path from a request to allow/ask/deny: brokerd runs it live, `ledger.replay`
runs it again over the log, so a replay reproduces every decision or names the first line that
differs. Everything it knows of a tool is the tool's row in the table (tools/kind.py): its
argument types, its target, its grant kind, what it reads and whether it writes. Decisions are
made on the tool's name and its PARSED, normalised target, never on a string: a path is matched
component by component, so "docs" covers "docs/a.md" but not "docs-old/a.md".

The order of rules never matters: a covering `deny` always wins; otherwise the most specific
covering rule decides (an exact file over any prefix, the longest prefix; on a tie the stricter,
ask over allow). No rule for the tool: deny ("no grant"), except a HOSTS tool, which asks. A tool
that reads its target's content as another tool (edit_file reads what read_file reads) needs that
tool's decision on the same target too, and the stricter of the two stands; a row's `denied_as`
tools' covering denies deny it too, and while any deny rule of its `reads_all_as` tools exists
(shell reads the whole workspace, as does an MCP server that sees it) it is never better than
ask; an MCP call's string arguments are each judged as the path a server would open. A target
the row lists in `ask_always` (note's memory/core.md) is never better than ask. Taint: a call of
a tool that writes asks, in a tainted session, whatever its grant.

An MCP tool (GrantKind.ARGS) asks when no rule covers the call. A rule of its that names an
argument its listed schema does not have as a string (a typo, or the server changed) is the
owner's mistake, failed closed: it never allows or asks, and a deny like that denies every call
(the reason says which rule to fix).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from boxmaker.brokerd.grants import ANY_HOST, Lookup, Mode, Rule
from boxmaker.brokerd.taint import Taint, must_ask
from boxmaker.brokerd.targets import BadTarget, Fields, HostPort
from boxmaker.brokerd.tools.kind import Args, GrantKind, Target, Tool
from boxmaker.brokerd.tools.spec import parse_arguments
from boxmaker.proto.decision import Request
from boxmaker.proto.hash import sha256_hex

APPROVING = ("yes", "always")
_STRICTNESS = {Mode.ALLOW: 0, Mode.ASK: 1, Mode.DENY: 2}


class LogError(Exception):
    """A replayed decision differs from the logged one, or the chain breaks; "line N: ..."
    (ledger.replay and log.py raise it)."""


@dataclass(frozen=True, slots=True)
class Decision:
    mode: Mode
    reason: str
    class_: str = "public"  # the deciding rule's: the class the result carries


@dataclass(frozen=True, slots=True)
class Decided:
    decision: Decision
    tool: Tool | None  # brokerd's own row for the call (None: no such tool)
    args: Args | None  # None when the arguments did not parse
    target: Target | None
    hash: str
    tainted: str | None = None  # why the taint made this call ask (shown to the owner)
    value: object = None  # the arguments as the row's `parse` made them (tools/kind.Tool)


def canonical_args(args: Args) -> str:
    return orjson.dumps(dict(args), option=orjson.OPT_SORT_KEYS).decode()


def call_hash(tool: str, args: Args) -> str:
    """What an approval is bound to: the tool's name and its canonical arguments."""
    return sha256_hex(f"{tool}\n{canonical_args(args)}".encode())


def shown(target: Target) -> str:
    if isinstance(target, Fields):
        return "this call"
    if isinstance(target, tuple):
        return "/".join(target) or "."
    return str(target) or "any command"


def verdict(rules: Sequence[Rule], tool: Tool, target: Target) -> Decision:
    """allow, ask or deny for `tool` on its normalised `target`, with the reason; a tool that
    reads as another also needs that one's verdict."""
    d = _rules_say(rules, tool, target)
    if d.mode is Mode.DENY:
        return d
    for other in tool.denied_as:
        for path in _paths_of(target):
            if _denies(rules, other, path):
                why = f"{tool.name} on {shown(path)} would tell what {other} denies there"
                return Decision(Mode.DENY, why, d.class_)
    if d.mode is Mode.ALLOW and (bounded := [o for o in tool.reads_all_as if _denies(rules, o)]):
        why = (
            f"{tool.name} can read every file of the workspace, and the grants deny "
            f"{' and '.join(bounded)} some: the owner sees each call"
        )
        return Decision(Mode.ASK, why, d.class_)
    if tool.reads_as is None:
        return d
    read = _rules_say(rules, _ReadAs(tool.reads_as, tool.grant), target)  # that tool's rules
    if _STRICTNESS[read.mode] <= _STRICTNESS[d.mode]:
        return d
    what = f"{tool.name} reads {shown(target)}'s content, which needs {tool.reads_as}"
    return Decision(read.mode, f"{what}: {read.reason}", d.class_)


def _paths_of(target: Target) -> list[Target]:
    """The workspace paths a target names: itself, or each string argument of an MCP call
    read as a path (a server that sees the workspace opens it)."""
    if not isinstance(target, Fields):
        return [target]
    return [f.path for _, f in target.values if f is not None and f.path is not None]


def _denies(rules: Sequence[Rule], name: str, target: Target | None = None) -> bool:
    """Whether a deny rule of `name` covers `target` (None: whether `name` has any deny)."""
    deny = (r for r in rules if r.tool == name and r.mode is Mode.DENY)
    return any(target is None or r.covers(name, target) >= 0 for r in deny)


@dataclass(frozen=True, slots=True)
class _ReadAs:  # the fields of a row _rules_say reads
    name: str
    grant: GrantKind
    ask_always: Mapping[str, str] = field(default_factory=dict)


def _misnamed(rules: Sequence[Rule], tool: Tool | _ReadAs) -> list[tuple[Rule, str]]:
    """An MCP tool's rules that name an argument its schema does not have as a string."""
    strings = getattr(tool, "strings", None)
    if tool.grant is not GrantKind.ARGS or strings is None:
        return []
    mine = (r for r in rules if r.tool == tool.name)
    return [(r, a.field) for r in mine for a in r.args if a.field not in strings]


def _rules_say(rules: Sequence[Rule], tool: Tool | _ReadAs, target: Target) -> Decision:
    name = tool.name
    misnamed = _misnamed(rules, tool)
    if deny := next(((r, f) for r, f in misnamed if r.mode is Mode.DENY), None):
        why = (
            f"a deny grant for {name} names its argument {deny[1]!r}, which {name} does not "
            "have as a string: every call is denied until grants.toml is fixed"
        )
        return Decision(Mode.DENY, why)
    broken = {r for r, _ in misnamed}
    depth = {r: -1 if r in broken else r.covers(name, target) for r in rules}
    covering = [r for r, d in depth.items() if d >= 0]
    asks = getattr(tool, "asks_by_default", False)
    if tool.grant is GrantKind.HOSTS and not covering:
        return Decision(Mode.ASK, f"no grant for {name} covers {target}: {name} asks by default")
    if not any(r.tool == name for r in rules):
        if asks:
            return Decision(Mode.ASK, f"no grant for {name}: {name} asks by default")
        return Decision(Mode.DENY, f"no grant for {name}: the owner has not granted this tool")
    if not covering and asks:
        return Decision(Mode.ASK, f"no grant for {name} covers {shown(target)}: it asks")
    if not covering:
        return Decision(Mode.DENY, f"no grant for {name} covers {shown(target)}")
    if any(r.mode is Mode.DENY for r in covering):
        mode = Mode.DENY  # a deny is never overridden
    else:  # the most specific rule decides; on a tie, the stricter
        deepest = max(depth[r] for r in covering)
        modes = (r.mode for r in covering if depth[r] == deepest)
        mode = max(modes, key=_STRICTNESS.__getitem__)
    pinned = tool.ask_always.get(target) if isinstance(target, str) else None
    if pinned is not None and mode is Mode.ALLOW:
        return Decision(Mode.ASK, pinned)
    deciding = [r for r in covering if r.mode is mode]
    class_ = deciding[0].class_ if deciding else "public"
    if isinstance(target, Fields):  # which rule decided, by its constraints
        said = sorted({" and ".join(a.shown() for a in r.args) or "every call" for r in deciding})
        return Decision(mode, f"grant: {name} {mode} on {'; '.join(said)}", class_)
    return Decision(mode, f"grant: {name} {mode} on {shown(target)}", class_)


def decide(
    table: Lookup,
    rules: tuple[Rule, ...],
    name: str,
    arguments: str,
    workspace: str,
    taint: Taint | None = None,
) -> Decided:
    """The decision on one request as it arrived (the tool's name, the arguments' JSON text),
    in a session whose taint is `taint`: a call the taint stops asks, whatever its grant."""
    tool = table.get(name)
    parsed = parse_arguments(tool, name, arguments, table.names())
    if tool is None or isinstance(parsed, str):
        why = parsed if isinstance(parsed, str) else f"no tool {name!r}"
        unparsed = call_hash(name, {"unparsed": arguments})
        return Decided(Decision(Mode.DENY, f"bad request: {why}"), tool, None, None, unparsed)
    args, value = parsed
    hashed = call_hash(name, args)
    if tool.target is None:
        why = f"{name} reads nothing: no grant needed"
        return Decided(Decision(Mode.ALLOW, why), tool, args, "", hashed, value=value)
    try:
        target = tool.target(args, workspace)
    except BadTarget as exc:
        what = "bad URL" if tool.grant is GrantKind.HOSTS else "bad path"
        return Decided(Decision(Mode.DENY, f"{what}: {exc}"), tool, args, None, hashed)
    d = verdict(rules, tool, target)
    host = target.host if isinstance(target, HostPort) else None
    tainted = None
    if d.mode is not Mode.DENY:
        tainted = must_ask(taint, name, tool.writes, host)
    if tainted is not None:
        d = Decision(Mode.ASK, tainted, d.class_)
    return Decided(d, tool, args, target, hashed, tainted, value)


def listed(rules: Sequence[Rule], tool: Tool) -> bool:
    """Whether brokerd lists `tool` (find_tool's list): it needs no grant, or some rule grants it
    something other than deny (a HOSTS tool asks by default: unless a deny covers every host)."""
    if not tool.needs_grant:
        return True
    mine = [r for r in rules if r.tool == tool.name]
    if tool.grant is GrantKind.HOSTS:
        return not any(r.mode is Mode.DENY and ANY_HOST in r.hosts for r in mine)
    if tool.asks_by_default:  # uncovered calls ask: only a deny of every call hides it
        return not any(r.mode is Mode.DENY and not r.args for r in mine)
    return any(r.mode is not Mode.DENY for r in mine)


DENIED_ARGS_CHARS = 1024  # of a denied call's arguments, logged; the rest is its hash and size


def request_record(
    time: str, call_id: str, name: str, arguments: str, decided: Decided, session: str, epoch: int
) -> Request:
    """The `request` line of a decided call (DecisionLog.append gives the time)."""
    canonical = arguments if decided.args is None else canonical_args(decided.args)
    row = None
    if decided.tool is not None and decided.tool.facts is not None:
        row = dict(decided.tool.facts)  # what replay rebuilds the row from
    size = None
    if decided.decision.mode is Mode.DENY and len(arguments) > DENIED_ARGS_CHARS:
        # Nothing runs, so nothing is decided again from them: what loopd can make brokerd
        # write for a refused call is bounded (issue 37 item 10); the hash is the whole call's.
        size = len(arguments.encode("utf-8", "surrogatepass"))
        arguments = arguments[:DENIED_ARGS_CHARS]
        canonical = canonical[:DENIED_ARGS_CHARS]
    return Request(
        time, call_id, session, epoch, name, arguments, canonical, decided.hash, row=row, size=size
    )
