"""What brokerd knows about one tool, as one object: the row of the table of tools. [core]

`grants`, `taint`, `policy` and `broker` read these fields and never branch on a tool's name
(issue 27; Codex's tools registry is the model: a handler per tool with `is_mutating()`). A new
tool is one file that builds a `Tool`, and one row in `table.py`: the row brings its arguments'
parser (once per call, into the tool's own frozen dataclass that `summary` and `run` read with
`ctx.arguments(cls)`), its config section `[broker.<name>]` and the factory of its state (made
once when brokerd starts, read with `ctx.state(cls)`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from boxmaker.brokerd.targets import Fields, HostPort
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema

if TYPE_CHECKING:  # the types only: this core runs none of them
    from boxmaker.brokerd.config import BrokerConfig
    from boxmaker.brokerd.paths import Workspace

# What a rule is matched against: a path's components, a name (note's file), a host and port
# (fetch's), "" (a tool whose rules name the tool only), or an MCP call's string arguments, each
# normalised (Fields).
Target = tuple[str, ...] | str | HostPort | Fields
Args = dict[str, Any]  # the arguments as JSON gave them, their types checked (spec.py)
T = TypeVar("T")


class BadArguments(ValueError):
    """A row's `parse` refuses the arguments; the message says what to send instead."""


class GrantKind(enum.StrEnum):
    """The key a tool's rules take in the grants file, and how they match the target."""

    NONE = ""  # the rule names the tool only (shell): it covers every call
    PATHS = "paths"  # path prefixes (`paths`) and exact files (`files`) in the workspace
    NAMES = "names"  # one of the tool's fixed names (note: `files = ["notes"]`)
    HOSTS = "hosts"  # exact hosts, each on every port or on one (`host:port`); "*" by the owner
    ARGS = "args"  # an MCP tool: every call, or `args` constraints on named string arguments


class ArgView(Protocol):
    """An argument constraint of a rule, as a tool reads it (grants.ArgRule)."""

    @property
    def field(self) -> str: ...
    @property
    def paths(self) -> tuple[tuple[str, ...], ...]: ...


class GrantView(Protocol):
    """A rule in force, as a tool reads it (grants.Rule)."""

    @property
    def tool(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def hosts(self) -> tuple[str, ...]: ...
    @property
    def args(self) -> Sequence[ArgView]: ...


class VerdictView(Protocol):
    """What the grants decide on a target, as a tool reads it (policy.Decision)."""

    @property
    def mode(self) -> str: ...


class Context(Protocol):
    """What a tool's `run`, `summary` and `unavailable` get from brokerd, one per call
    (broker.CallContext)."""

    reached: str | None  # the host the call reached, set by the tool (taint records it)

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def rules(self) -> Sequence[GrantView]: ...  # the grants in force (fetch's redirects)
    @property
    def ws(self) -> Workspace: ...  # the workspace, opened beneath (paths.py)
    @property
    def cancelled(self) -> Callable[[], bool]: ...  # true once loopd gave up on the call
    @property
    def epoch(self) -> int: ...  # the epoch the call claims (an MCP list is frozen per epoch)
    @property
    def session(self) -> str: ...  # the session the call is of (loopd names it)

    def verdict(self, name: str, target: Target) -> VerdictView: ...

    def capped(self, resp: ToolResponse) -> ToolResponse: ...  # [broker] result_cap_bytes

    def arguments(self, cls: type[T]) -> T:
        """The call's arguments as its row's `parse` made them, once (a `cls`)."""
        ...

    def state(self, cls: type[T]) -> T:
        """The tool's state as its row's `state` factory made it when brokerd started."""
        ...


@dataclass(frozen=True, slots=True)
class Setup:
    """What a row's `state` factory is given, once, when brokerd starts."""

    config: BrokerConfig
    ws: Workspace
    section: object  # the row's `[broker.<name>]` section as read (its defaults when absent)

    def own(self, cls: type[T]) -> T:
        assert isinstance(self.section, cls), f"the section is a {type(self.section).__name__}"
        return self.section


Run = Callable[[Context, Target, Args, ResultClass], ToolResponse]
Summary = Callable[[Context, Target, Args], str]


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool.

    Attributes:
        schema: what the model sees (name, description, JSON schema).
        types: each argument's Python type (str or int); `required` comes from the schema.
        target: the arguments made into what grants name, normalised once (targets.py);
            raises targets.BadTarget. None: the tool needs no grant (clock).
        grant: which key its rules take, and how they match.
        names: for GrantKind.NAMES, the names a rule may list, and the default.
        reads_as: the tool whose decision on the same target this one needs because it reads
            that target's content (edit_file reads what read_file may read): the stricter wins.
        denied_as: tools whose covering deny denies this one too on the same target (what the
            agent may not read it may not list, write or probe either: each answer, an error
            included, would say something of what is there).
        reads_all_as: tools whose rules bound what this one reads, though it reads the whole
            workspace (shell): while any of them has a deny rule, this one is never better
            than ask (the owner sees the whole command).
        writes: it can write or send: a tainted session asks before it runs (the default: a
            row says False only for a tool known to read and nothing else).
        untrusted: everything it answers, errors included, is untrusted (taints the session):
            it reads content (the default). A tool may also mark one answer untrusted itself
            (fetch, once a server answered).
        summary: the whole call, for the owner's prompt (never cut).
        always: the rule an "always" adds for this target: (grant key, value) or the reason
            there is none.
        run: runs the call.
        parse: the arguments made into the tool's own value, once per call (raises
            BadArguments: the message says what to send); `summary` and `run` read it with
            `ctx.arguments(cls)`. None: the value is the arguments' dict.
        classes: its rules may say `class`.
        ask_always: targets never better than ask, whatever the grants, with the reason.
        asks_by_default: no rule names it: it asks (else it is denied).
        strings: GrantKind.ARGS: the arguments its schema has as strings, which its rules'
            `args` may name; None while not known (an MCP server not listed yet).
        facts: for a row known only at run time (an MCP tool's), what its decision read of it,
            as JSON: the request's log line carries it, so `brokerd verify` decides again.
        unavailable: why it cannot run here at all (shell with no sandbox), else None: a call
            that would be asked is refused at once, and the owner is never asked in vain.
        section: its own config keys, `[broker.<name>]`: a frozen dataclass whose fields are
            walker keys (boxmaker/_config), each with its kind, bounds and default; None: none.
        state: makes the tool's state once when brokerd starts (a memory folder, a sandbox),
            from the config and its section. None: its state is its section (or None).
    """

    schema: ToolSchema
    types: Mapping[str, type]
    run: Run
    summary: Summary
    grant: GrantKind = GrantKind.PATHS
    target: Callable[[Args, str], Target] | None = None
    names: tuple[str, ...] = ()
    reads_as: str | None = None
    denied_as: tuple[str, ...] = ()
    reads_all_as: tuple[str, ...] = ()
    writes: bool = True  # a new tool counts as a writer until its row says it only reads
    untrusted: bool = True  # and its answers as untrusted until its row says otherwise
    always: Callable[[Target, Args], tuple[str, str] | str] | None = None
    parse: Callable[[Args], object] | None = None
    classes: bool = False
    ask_always: Mapping[str, str] = field(default_factory=dict)
    asks_by_default: bool = False  # with no rule naming it: ask, not deny (an MCP tool)
    strings: frozenset[str] | None = None
    facts: Mapping[str, Any] | None = None
    unavailable: Callable[[Context], str | None] | None = None
    section: type | None = None
    state: Callable[[Setup], object] | None = None

    @property
    def needs_grant(self) -> bool:
        return self.target is not None

    @property
    def name(self) -> str:
        return self.schema.name

    def always_for(self, target: Target, args: Args) -> tuple[str, str] | str:
        """(key, value) of the exact rule "always" adds for this call, or why it adds none."""
        if self.always is None:
            return f"nothing: a {self.name} call is asked about every time"
        return self.always(target, args)


def brief_of(tool: Tool, target: Target) -> str:
    """What loopd is told while the owner is asked: the tool and the target, nothing read."""
    shown = "" if isinstance(target, Fields) else target
    shown = "/".join(shown) or "." if isinstance(shown, tuple) else shown
    return f"{tool.name} {shown}".rstrip() + ": waiting for the owner's answer"


def visible(text: str) -> str:
    """`text` with every character a terminal would not show as itself escaped (`\\x1b`,
    `\\u202e`): controls, format characters (bidi overrides, zero-width), separators. Lines stay
    lines: only \\n is kept. What the owner approves is then what they see, whatever prints it.
    When anything was escaped, every backslash of the original is doubled (as bxctl's escape.py
    does), so a `\\x1b` typed in a command is never taken for an escaped ESC, nor one for it."""
    if all(c.isprintable() or c == "\n" for c in text):
        return text
    return "".join(
        "\\\\" if c == "\\" else c if c.isprintable() or c == "\n" else _escaped(ord(c))
        for c in text
    )


def _escaped(code: int) -> str:
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def no_always(reason: str) -> Callable[[Target, Args], str]:
    return lambda _target, _args: reason


def exact_path(target: Target, _args: Args) -> tuple[str, str] | str:
    """ "always" on a path: that file, exactly (`files`), never a prefix."""
    if not isinstance(target, tuple) or not target:
        return "nothing: the workspace itself cannot be one file's grant"
    return ("files", "/".join(target))
