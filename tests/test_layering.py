"""Boxmaker's layering, over the whole tree (STYLE.md R1/R2; issue 8 item 1).

`RULES` is the table: each row is a package or module, with the boxmaker packages and modules it
may import. A module belongs to the row with the longest matching name; modules of one row may
import each other, and the module graph as a whole may have no cycle. Anything not in the row's
set is an upward (or sideways) import and fails. A new package or a new module of a row that lists
its modules one by one fails until it is given its own row.

The [core] modules (all of `proto`, and every module whose docstring's first line ends in `[core]`)
may not import an I/O module or call an I/O builtin. uvloop's tests/test_sourcecode.py is the
precedent for checks like these in the suite. Everything is read with `ast` (the `.pyx` twins with
a line scan), so an import inside a function, a `try` or an `if TYPE_CHECKING` block counts too.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import boxmaker

ROOT = Path(boxmaker.__file__).resolve().parent

PROTO = "boxmaker.proto"
FAST = "boxmaker._fast"
CLI = "boxmaker._cli"
DEFAULTS = "boxmaker._defaults"
TOML = "boxmaker._toml"
FRAMED = "boxmaker._framed"
CLIENT = "boxmaker._client"
DAEMON = "boxmaker._daemon"
CRASH = "boxmaker._crashpoint"
PID = "boxmaker._pid"
CONFIG = "boxmaker.loopd.config"
CONF = "boxmaker._config"  # the typed config floor: kinds, walker, readfile (issue 35)
LLAMA = "boxmaker.loopd.llama"
SESSION = "boxmaker.session"
TURN = "boxmaker.loopd.turn"
TOOLS = "boxmaker.loopd.tools"
SELFTEST = "boxmaker.loopd.selftest"
CHANNEL = "boxmaker.loopd.channel"
WORKERS = "boxmaker.loopd.workers"
VERIFY = "boxmaker.verify"
CACHE = "boxmaker.loopd.cache"
BROKERD = "boxmaker.brokerd"
OPEN = "boxmaker.loopd.session_open"


def _llama(*names: str) -> frozenset[str]:
    return frozenset(f"{LLAMA}.{n}" for n in names)


# row -> what its modules may import, besides each other. Bottom of the tree first.
RULES: dict[str, frozenset[str]] = {
    "boxmaker": frozenset(),  # __init__: __version__ only; a new package needs its own row
    PROTO: frozenset(),  # shared by every process: the ground floor, stdlib and orjson only
    CLI: frozenset(),  # the CLI shell the three programs share: Environment, Parser, ExitStatus
    DEFAULTS: frozenset(),  # the socket and home defaults loopd and bxctl share
    TOML: frozenset(),  # [core] the one TOML writer (configs, the grants brokerd adds)
    CRASH: frozenset(),  # the test-only crash hook the session store and gatewayd share
    PID: frozenset(),  # whether a pid is alive: bxctl's tools line, make run's wait
    FRAMED: frozenset({PROTO}),  # the framed connection of broker.sock and owner.sock, both ends
    # the clients every program shares: loop.sock's channel client, owner.sock's owner client
    CLIENT: frozenset({PROTO, DEFAULTS, FRAMED}),
    FAST: frozenset({f"{PROTO}.errors"}),  # the twins raise proto's errors (R3)
    DAEMON: frozenset({PROTO}),  # the Unix listener both daemons share; never _fast
    # the typed config floor (issue 35): value kinds (the socket path limit), the schema walk over
    # a config's dataclasses, the bounded file read; loopd's and gatewayd's configs use it
    CONF: frozenset({PROTO, DAEMON}),
    "boxmaker.inferproxy": frozenset({PROTO, FAST, CLI, DAEMON, "boxmaker.inferproxy.limits"}),
    "boxmaker.inferproxy.limits": frozenset(),  # [core]
    # loopd. The package row holds cli.py and __main__.py (and serve.py later).
    "boxmaker.loopd": frozenset({PROTO, CLI, DAEMON, FAST, CONFIG, LLAMA, SELFTEST})
    | frozenset({SESSION, TURN, TOOLS, CHANNEL, WORKERS}),
    CONFIG: frozenset({PROTO, CONF, DAEMON, DEFAULTS}),
    # The self-test in one place (issue 20): the checks, and its run with the keeper's probe.
    SELFTEST: frozenset({PROTO, CONFIG, LLAMA, f"{TURN}.records", CACHE, f"{CACHE}.policy"}),
    # llama: one row per module, because the direction inside it matters.
    LLAMA: frozenset(),  # __init__
    f"{LLAMA}.errors": frozenset(),  # llama's ground floor
    f"{LLAMA}.types": frozenset({PROTO}),
    f"{LLAMA}.http": frozenset({PROTO, FAST}) | _llama("errors"),
    f"{LLAMA}.sse": frozenset({PROTO, FAST}) | _llama("errors"),
    f"{LLAMA}.transport": frozenset({PROTO, CONFIG}) | _llama("errors", "http"),
    f"{LLAMA}.request": frozenset({PROTO, CONFIG}) | _llama("types"),
    f"{LLAMA}.assemble": frozenset({PROTO, CONFIG}) | _llama("errors", "types"),
    f"{LLAMA}.info": frozenset({PROTO}) | _llama("errors", "http"),
    f"{LLAMA}.retry": frozenset({CONFIG}) | _llama("errors"),
    f"{LLAMA}.waits": frozenset({CONFIG}) | _llama("errors"),
    f"{LLAMA}.gate": frozenset({PROTO}) | _llama("errors", "types"),
    f"{LLAMA}.slots": frozenset({CONFIG}) | _llama("errors", "http", "info", "transport"),
    f"{LLAMA}.chat": frozenset({PROTO, CONFIG})
    | _llama("errors", "types", "http", "sse", "transport", "assemble", "info", "request", "waits"),
    f"{LLAMA}.client": frozenset({PROTO, CONFIG})
    | _llama("errors", "types", "transport", "chat", "gate", "info", "request", "retry"),
    # The packages M2b adds (issue 8: rows before the code).
    SESSION: frozenset({PROTO, CRASH}),  # the session library: loopd, brokerd and bxctl use it
    TOOLS: frozenset({PROTO, CONFIG, FRAMED}),  # port.py reads [tools] (issue 22)
    TURN: frozenset({PROTO, CONFIG, LLAMA, SESSION, TOOLS, OPEN}),
    # Opening a session (issue 20): `loopd turn` and the worker share it.
    OPEN: frozenset({PROTO, CONFIG, LLAMA, SESSION, TOOLS}),
    # The channel on loop.sock and the session workers behind it (issue 11).
    CHANNEL: frozenset({PROTO, DAEMON, CONFIG, WORKERS, f"{WORKERS}.wire"}),
    WORKERS: frozenset(
        {PROTO, CONFIG, LLAMA, SESSION, TOOLS, TURN, OPEN, f"{WORKERS}.wire", f"{CACHE}.policy"}
    ),
    f"{WORKERS}.wire": frozenset({PROTO}),  # [core]: the pipe kinds
    # Slot save/restore (issue 14): the policy is [core]; the keeper is the main process's shell.
    CACHE: frozenset({PROTO, CONFIG, LLAMA, SESSION, f"{CACHE}.policy"}),  # session.files
    f"{CACHE}.policy": frozenset({PROTO, f"{LLAMA}.info"}),  # [core] on llama's /slots parser
    # brokerd (issues 22, 23, 27): the only process with authority. Its cores (config, targets,
    # grants, policy, ledger, tools.kind, tools.spec, taint, netcheck) sit below its shells; it
    # never imports loopd, nor loopd it. What it knows of a tool is the tool's row (tools.kind),
    # gathered in tools.table.
    BROKERD: frozenset({PROTO, CLI, DAEMON, SESSION, FRAMED})  # conn.py: a Framed of its own
    | frozenset({f"{BROKERD}.{m}" for m in ("config", "grants", "policy", "paths", "taint")})
    | frozenset({f"{BROKERD}.{m}" for m in ("ledger", "amend", "targets")})
    | frozenset({f"{BROKERD}.sandbox", f"{BROKERD}.tools", f"{BROKERD}.tools.spec"})
    | frozenset({f"{BROKERD}.tools.kind", f"{BROKERD}.tools.table", f"{BROKERD}.mcp"}),
    f"{BROKERD}.config": frozenset({CONF}),  # [core] on the typed walker
    # openat2 beneath the workspace, atomic writes; the grants read as session.files reads
    f"{BROKERD}.paths": frozenset({SESSION}),
    f"{BROKERD}.targets": frozenset({f"{BROKERD}.netcheck"}),  # [core]: what grants name
    f"{BROKERD}.grants": frozenset({PROTO, TOML, f"{BROKERD}.targets", f"{BROKERD}.tools.kind"}),
    f"{BROKERD}.policy": frozenset(
        {PROTO, f"{BROKERD}.grants", f"{BROKERD}.taint", f"{BROKERD}.targets"}
        | {f"{BROKERD}.tools.kind", f"{BROKERD}.tools.spec"}
    ),
    f"{BROKERD}.ledger": frozenset(  # [core]: the replay and the taint ledger, on the typed records
        {PROTO, SESSION, f"{BROKERD}.grants", f"{BROKERD}.policy", f"{BROKERD}.taint"}
        | {f"{BROKERD}.tools.kind"}  # the row an MCP request line's facts give
    ),
    f"{BROKERD}.amend": frozenset(  # "always"; the grants file read by the home-file rules
        {SESSION, TOML, f"{BROKERD}.grants", f"{BROKERD}.tools.kind"}
    ),
    # bwrap's command line and one run: the limits' bounds, and the workspace walks of paths
    f"{BROKERD}.sandbox": frozenset({CONF, f"{BROKERD}.paths", f"{BROKERD}.quota"})
    | frozenset({f"{BROKERD}.tree"}),
    f"{BROKERD}.quota": frozenset({f"{BROKERD}.tree"}),  # the write quota: a workspace walk
    f"{BROKERD}.tree": frozenset({f"{BROKERD}.paths"}),  # the walk: bytes added, set-id bits
    # MCP servers (issue 31): config, hosts and catalog are cores; the rest runs the servers in
    # the sandbox; rows makes their tools rows of the table
    f"{BROKERD}.mcp": frozenset({PROTO, CONF, f"{BROKERD}.config", f"{BROKERD}.netcheck"})
    | frozenset({f"{BROKERD}.sandbox", f"{BROKERD}.tools.kind", f"{BROKERD}.tools.table"})
    | frozenset({f"{BROKERD}.quota"})  # an rw server's write quota
    | frozenset({f"{BROKERD}.targets", f"{BROKERD}.paths", f"{BROKERD}.tools"}),  # arg grants
    f"{BROKERD}.netcheck": frozenset(),  # [core]: which addresses fetch may reach
    f"{BROKERD}.taint": frozenset(),  # [core]: taint recomputed from the decision records
    # files.py, note.py, shell.py, fetch.py, clock.py: each a tool and its row (shells);
    # htmltext.py is a core; table.py gathers the rows
    f"{BROKERD}.tools": frozenset(
        {PROTO, SESSION, CONF, f"{BROKERD}.config", f"{BROKERD}.paths", f"{BROKERD}.sandbox"}
        | {f"{BROKERD}.netcheck", f"{BROKERD}.targets", f"{BROKERD}.tools.spec"}
        | {f"{BROKERD}.tools.kind"}
    ),
    # [core]: a row; config and paths for its types only (a section's reader, the workspace)
    f"{BROKERD}.tools.kind": frozenset(
        {PROTO, f"{BROKERD}.targets", f"{BROKERD}.config", f"{BROKERD}.paths"}
    ),
    f"{BROKERD}.tools.spec": frozenset({PROTO, f"{BROKERD}.tools.kind"}),  # [core]
    # never the daemons
    "boxmaker.bxctl": frozenset({PROTO, CLI, DEFAULTS, SESSION, FRAMED, CLIENT, PID}),
    # make verify-device: drives the whole stack from outside, as an owner would (issue 12).
    VERIFY: frozenset(
        {PROTO, CONFIG, LLAMA, SESSION, TOML, PID, f"{VERIFY}.checks", f"{VERIFY}.tee"}
        | {f"{VERIFY}.gateway"}
    ),
    f"{VERIFY}.checks": frozenset({PROTO, f"{LLAMA}.info"}),  # [core]: the PASS/FAIL/SKIP rules
    # gatewayd's checks against the owner's Mattermost (make verify-device GATEWAY=)
    f"{VERIFY}.gateway": frozenset(
        {CONF, f"{VERIFY}.checks", "boxmaker.gatewayd.config", "boxmaker.gatewayd.mattermost"}
    ),
    f"{VERIFY}.tee": frozenset(),  # the capture, stdlib only (the real-server tests use it too)
    # gatewayd (issue 36): the Mattermost client is its floor, on websockets + httpx only; its
    # cores (who, sessions, queues, split, replies, catchup, messages, approvals) sit beside its
    # shell (serve, catching, turns, relay, config, cli), which reaches loopd through the shared
    # channel client only, and brokerd's chat.sock (when on) through the shared chat client
    "boxmaker.gatewayd": frozenset(
        {PROTO, CLIENT, CONF, DEFAULTS, CRASH, "boxmaker.gatewayd.mattermost"}
    ),
    "boxmaker.gatewayd.mattermost": frozenset({PROTO}),
}

# Third-party packages boxmaker may import (pyproject's dependencies); the rest is the stdlib,
# with typeshed's stdlib stubs for `if TYPE_CHECKING` imports.
THIRD_PARTY = frozenset({"orjson", "prompt_toolkit"}) | {  # prompt_toolkit: bxctl chat only
    "mcp",  # brokerd/mcp: the SDK and what its types import
    "mcp_types",
    "anyio",
    "pydantic",
    "jsonschema",
    "websockets",  # gatewayd/mattermost: the socket and the REST API
    "httpx",
    "referencing",  # jsonschema's resolver: brokerd's registry that retrieves nothing
}
STDLIB = sys.stdlib_module_names | {"__future__", "_typeshed"}

# [core] modules may not import these (R2's list, then the rest of the stdlib that reaches
# outside the process or sleeps) nor call these builtins.
FORBIDDEN_MODULES = frozenset(
    {"socket", "os", "selectors", "threading", "subprocess", "asyncio", "time"}
    | {"multiprocessing", "signal", "shutil", "tempfile", "pathlib", "importlib"}
)
FORBIDDEN_CALLS = frozenset({"open", "print", "input", "exec", "eval", "__import__", "breakpoint"})

# STYLE.md R1's [core] modules: each must carry the marker, so the I/O check can't be dropped by
# editing a docstring.
R1_CORES = [
    TOML,
    f"{BROKERD}.mcp.config",
    f"{BROKERD}.mcp.hosts",
    f"{BROKERD}.mcp.catalog",
    f"{BROKERD}.mcp.memory",
    "boxmaker.inferproxy.limits",
    *sorted(_llama("errors", "types", "http", "sse", "request", "assemble", "info", "retry")),
    f"{LLAMA}.waits",
    f"{SESSION}.replay",
    f"{SESSION}.chain",
    f"{SESSION}.epochs",
    f"{TURN}.loop",
    f"{TURN}.compact",
    f"{TURN}.limits",
    f"{TURN}.records",
    f"{TURN}.recorded",
    f"{TOOLS}.registry",
    "boxmaker.bxctl.render",
    "boxmaker.bxctl.rows",
    "boxmaker.bxctl.escape",
    "boxmaker.bxctl.prompt",
    f"{WORKERS}.wire",
    f"{VERIFY}.checks",
    f"{CACHE}.policy",
    f"{BROKERD}.grants",
    f"{BROKERD}.config",
    f"{BROKERD}.policy",
    f"{BROKERD}.tools.spec",
    f"{BROKERD}.netcheck",
    f"{BROKERD}.taint",
    f"{BROKERD}.tools.htmltext",
    f"{BROKERD}.targets",
    f"{BROKERD}.ledger",
    f"{BROKERD}.tools.kind",
    "boxmaker.gatewayd.mattermost.types",
    "boxmaker.gatewayd.mattermost.protocol",
    *(f"boxmaker.gatewayd.{m}" for m in ("who", "sessions", "queues", "split", "replies")),
    "boxmaker.gatewayd.catchup",
    "boxmaker.gatewayd.messages",
    "boxmaker.gatewayd.approvals",
]

# The size of a module (STYLE.md R1: about 400 lines). The files over it, each with its way out.
MAX_LINES = 400
OVERSIZE: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # the dotted name, resolved against the package for relative imports


@dataclass(frozen=True)
class Module:
    name: str
    path: Path

    @property
    def rel(self) -> str:
        return self.path.relative_to(ROOT.parent).as_posix()

    @property
    def is_package(self) -> bool:
        return self.path.stem == "__init__"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(
    (Module(_module_name(p), p) for p in [*ROOT.rglob("*.py"), *ROOT.rglob("*.pyx")]),
    key=lambda m: m.name,
)
NAMES = frozenset(m.name for m in MODULES)


def row_of(name: str) -> str:
    """The row a module belongs to: the longest row name that is it or a package above it."""
    return max((r for r in RULES if name == r or name.startswith(r + ".")), key=len)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _resolve(mod: Module, level: int, module: str | None, alias: str) -> str:
    package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
    if level:
        base = package.split(".")[: len(package.split(".")) - (level - 1)]
        module = ".".join([*base, *([module] if module else [])])
    assert module is not None
    # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod.
    name = f"{module}.{alias}"
    return name if name in NAMES or name in TEST_NAMES else module


# `from x import y` and `import x` in a .pyx; `cimport` is compile-time and passes over.
_PYX_FROM = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+(\([^)]*\)|[\w, ]+)", re.MULTILINE)
_PYX_IMPORT = re.compile(r"^\s*import\s+([\w.]+)", re.MULTILINE)


def _line_of(text: str, m: re.Match[str]) -> int:
    return text.count("\n", 0, m.start()) + 1


def imports_of(mod: Module, source: str | None = None) -> list[Import]:
    """Every import in a module, absolute and relative, at any depth of the code."""
    text = mod.path.read_text("utf-8") if source is None else source
    found: list[Import] = []
    if mod.path.suffix == ".pyx":
        for m in _PYX_FROM.finditer(text):
            line = _line_of(text, m)
            for alias in re.split(r"[\s,()]+", m.group(3)):
                if alias:
                    target = _resolve(mod, len(m.group(1)), m.group(2) or None, alias)
                    found.append(Import(line, target))
        found += [Import(_line_of(text, m), m.group(1)) for m in _PYX_IMPORT.finditer(text)]
        return found
    for node in ast.walk(ast.parse(text, str(mod.path))):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found += [
                Import(node.lineno, _resolve(mod, node.level, node.module, a.name))
                for a in node.names
            ]
    return found


def upward_imports(mod: Module, source: str | None = None) -> list[str]:
    """The imports of `mod` that its row does not allow, as "path line N: imports X (row R)"."""
    row = row_of(mod.name)
    bad = []
    for imp in imports_of(mod, source):
        top = imp.target.split(".")[0]
        if top == "boxmaker":
            if row_of(imp.target) == row or any(_under(imp.target, a) for a in RULES[row]):
                continue
        elif top in STDLIB or top in THIRD_PARTY:
            continue
        bad.append(f"{mod.rel} line {imp.line}: imports {imp.target} (row {row})")
    return bad


def io_uses(source: str, filename: str = "<source>") -> list[str]:
    """Every forbidden import or call in `source`, as "line N: what"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in FORBIDDEN_MODULES
            ]
        elif isinstance(node, ast.ImportFrom):
            # Relative imports (level > 0) are this package's own modules.
            if node.level == 0 and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS
        ):
            found.append(f"line {node.lineno}: call {node.func.id}()")
    return found


def is_marked_core(mod: Module) -> bool:
    doc = ast.get_docstring(ast.parse(mod.path.read_text("utf-8"))) or ""
    return doc.splitlines()[0].rstrip().endswith("[core]") if doc else False


PY_MODULES = [m for m in MODULES if m.path.suffix == ".py"]
CORES = [m for m in PY_MODULES if _under(m.name, PROTO) or is_marked_core(m)]
BY_NAME = {m.name: m for m in MODULES}


def test_the_walk_sees_the_tree() -> None:
    assert {PROTO, f"{PROTO}.frame", f"{LLAMA}.errors", f"{LLAMA}.types", CONFIG, CLI} <= NAMES
    assert f"{FAST}._sse_c" in NAMES  # the .pyx twins are read too
    assert {f"{PROTO}.frame", f"{LLAMA}.http", "boxmaker.inferproxy.limits"} <= {
        m.name for m in CORES
    }


@pytest.mark.parametrize("mod", MODULES, ids=[m.name for m in MODULES])
def test_module_imports_only_what_its_row_allows(mod: Module) -> None:
    assert upward_imports(mod) == []


def test_every_package_has_its_own_row() -> None:
    packages = {m.name for m in MODULES if m.is_package}
    assert sorted(packages - RULES.keys()) == []


def _graph(edges: dict[str, frozenset[str]]) -> Iterator[list[str]]:
    """Each cycle found by a depth-first walk, as the list of names around it."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> Iterator[list[str]]:
        if node in path:
            yield [*path[path.index(node) :], node]
            return
        if node in done:
            return
        path.append(node)
        for nxt in sorted(edges.get(node, frozenset())):
            yield from visit(nxt)
        path.pop()
        done.add(node)

    for node in sorted(edges):
        yield from visit(node)


def test_the_table_itself_points_one_way() -> None:
    edges = {r: frozenset(row_of(a) for a in allowed) - {r} for r, allowed in RULES.items()}
    assert list(_graph(edges)) == []


def test_no_import_cycle_between_modules() -> None:
    edges = {
        m.name: frozenset(i.target for i in imports_of(m) if i.target in NAMES) - {m.name}
        for m in MODULES
    }
    assert list(_graph(edges)) == []


@pytest.mark.parametrize("mod", CORES, ids=[m.name for m in CORES])
def test_core_module_does_no_io(mod: Module) -> None:
    assert io_uses(mod.path.read_text("utf-8"), str(mod.path)) == [], f"{mod.rel} reaches for I/O"


@pytest.mark.parametrize("name", R1_CORES)
def test_style_cores_carry_the_marker(name: str) -> None:
    assert name in BY_NAME, f"{name} is gone: STYLE.md R1 names it as a [core] module"
    assert is_marked_core(BY_NAME[name]), f"{name}: the docstring's first line ends in [core]"


@pytest.mark.parametrize("mod", MODULES, ids=[m.name for m in MODULES])
def test_module_stays_small(mod: Module) -> None:
    lines = len(mod.path.read_text("utf-8").splitlines())
    assert mod.rel in OVERSIZE or lines <= MAX_LINES, f"{mod.rel}: {lines} lines"


def test_oversize_entries_are_still_needed() -> None:
    stale = [
        rel
        for rel in OVERSIZE
        if not (ROOT.parent / rel).exists()
        or len((ROOT.parent / rel).read_text("utf-8").splitlines()) <= MAX_LINES
    ]
    assert stale == [], f"gone or small now, remove from OVERSIZE: {stale}"


LLAMA_MODULES = [m for m in PY_MODULES if _under(m.name, LLAMA)]


@pytest.mark.parametrize("mod", LLAMA_MODULES, ids=[m.name for m in LLAMA_MODULES])
def test_only_the_transport_touches_a_socket_in_llama(mod: Module) -> None:
    uses = {i.target.split(".")[0] for i in imports_of(mod)} & {"socket", "selectors", "ssl"}
    assert bool(uses) == (mod.name == f"{LLAMA}.transport")


@pytest.mark.parametrize("mod", LLAMA_MODULES, ids=[m.name for m in LLAMA_MODULES])
def test_no_module_of_the_client_starts_a_thread(mod: Module) -> None:
    assert "Thread(" not in mod.path.read_text("utf-8")


def twin_imports(mod: Module, source: str | None = None) -> list[str]:
    """The Python twins a compiled twin imports: none, or the differential tests compare a piece
    of code with itself (STYLE.md R3)."""
    return [
        i.target for i in imports_of(mod, source) if re.fullmatch(rf"{FAST}\._\w+_py", i.target)
    ]


COMPILED = [m for m in MODULES if m.path.suffix == ".pyx"]


@pytest.mark.parametrize("mod", COMPILED, ids=[m.name for m in COMPILED])
def test_a_compiled_twin_imports_no_python_twin(mod: Module) -> None:
    assert twin_imports(mod) == []


def test_the_twin_check_catches_an_import_of_a_python_twin() -> None:
    source = "from boxmaker._fast._sse_py import check_cap\nfrom boxmaker.proto.errors import E\n"
    assert twin_imports(_fake(f"{FAST}._sse_c", ".pyx"), source) == [f"{FAST}._sse_py"]


# The checks themselves, on made-up sources: each form they must catch, and what they must allow.


def _fake(name: str, suffix: str = ".py") -> Module:
    parts = name.split(".")
    return Module(name, ROOT.parent.joinpath(*parts).with_suffix(suffix))


@pytest.mark.parametrize(
    ("name", "source", "found"),
    [
        (f"{LLAMA}.http", "from boxmaker.loopd.llama.types import X", [f"{LLAMA}.types"]),
        (f"{LLAMA}.http", "from . import chat", [f"{LLAMA}.chat"]),
        (f"{LLAMA}.errors", "from .types import ChatEvent", [f"{LLAMA}.types"]),
        (f"{LLAMA}.types", "def f():\n    from boxmaker.loopd import cli", ["boxmaker.loopd.cli"]),
        (CONFIG, "import boxmaker.loopd.llama.types", [f"{LLAMA}.types"]),
        (f"{PROTO}.frame", "from boxmaker.loopd.llama.errors import E", [f"{LLAMA}.errors"]),
        (f"{PROTO}.frame", "import requests", ["requests"]),
        (f"{FAST}._sse_py", "from boxmaker.proto import ProtocolError", [PROTO]),
        (f"{DAEMON}.listen", "from boxmaker._fast import splice", [f"{FAST}.splice"]),
        (f"{TOOLS}.port", "from boxmaker.session.store import S", [f"{SESSION}.store"]),
        (f"{SESSION}.store", "from boxmaker.loopd.turn.loop import T", [f"{TURN}.loop"]),
        ("boxmaker.bxctl.cli", "from boxmaker.loopd.llama import client", [f"{LLAMA}.client"]),
        ("boxmaker.bxctl.cli", "import boxmaker.inferproxy.proxy", ["boxmaker.inferproxy.proxy"]),
        ("boxmaker.webd.main", "from boxmaker.proto import Frame", [PROTO]),  # no row yet
    ],
)
def test_the_table_catches_an_upward_import(name: str, source: str, found: list[str]) -> None:
    bad = upward_imports(_fake(name), source)
    assert [b.split("imports ")[1].split(" ")[0] for b in bad] == found


@pytest.mark.parametrize(
    ("name", "source"),
    [
        (f"{LLAMA}.http", "from boxmaker.loopd.llama.errors import BadResponse"),
        (f"{LLAMA}.http", "from boxmaker._fast.chunked import ChunkedDecoder\nimport re"),
        (f"{LLAMA}.client", "from .gate import SlotGate"),
        (f"{PROTO}.frame", "from .errors import FrameError\nimport orjson"),
        (f"{SESSION}.store", "from boxmaker.proto import Frame\nfrom .files import lock"),
        (f"{TURN}.loop", "from boxmaker.loopd.llama.types import Completion"),
        ("boxmaker.bxctl.cli", "from boxmaker.session.store import SessionStore"),
        ("boxmaker.loopd.cli", "from boxmaker.loopd.selftest import iter_selftest"),
    ],
)
def test_the_table_allows_a_downward_import(name: str, source: str) -> None:
    assert upward_imports(_fake(name), source) == []


def test_the_pyx_scan_reads_python_imports_and_passes_over_cimports() -> None:
    source = (
        "from libc.string cimport memchr\n"
        "from ._syscalls cimport (\n    splice,\n)\n"
        "import os\n"
        "from boxmaker._fast._sse_py import (\n    check_cap,\n    other,\n)\n"
        "from boxmaker.proto.errors import SSEError\n"
    )
    found = imports_of(_fake(f"{FAST}._sse_c", ".pyx"), source)
    assert [(i.line, i.target) for i in found] == [
        (6, f"{FAST}._sse_py"),
        (6, f"{FAST}._sse_py"),
        (10, f"{PROTO}.errors"),
        (5, "os"),
    ]


def test_a_cycle_is_found() -> None:
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}
    assert list(_graph(edges)) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import os", ["line 1: import os"]),
        ("import os.path", ["line 1: import os.path"]),
        ("import json, socket as s", ["line 1: import socket"]),
        ("from time import sleep", ["line 1: from time import ..."]),
        ("from asyncio.streams import StreamReader", ["line 1: from asyncio.streams import ..."]),
        ("def f():\n    import threading", ["line 2: import threading"]),
        ("try:\n    import selectors\nexcept ImportError:\n    pass", ["line 2: import selectors"]),
        (
            "import subprocess\nimport pathlib",
            ["line 1: import subprocess", "line 2: import pathlib"],
        ),
        ("x = open('log')", ["line 1: call open()"]),
        ("m = __import__('os')", ["line 1: call __import__()"]),
        ("print('hi')", ["line 1: call print()"]),
    ],
)
def test_the_io_check_catches_each_form(source: str, found: list[str]) -> None:
    assert io_uses(source) == found


@pytest.mark.parametrize(
    "source",
    [
        "import hashlib, re, enum",
        "import orjson",
        "from datetime import UTC, datetime",
        "from . import frame",
        "from .time import x",  # a sibling module, not the stdlib's
        "from ..proto import log",
        "import timeit_not_time",
        "f.open()",  # a method, not the builtin
    ],
)
def test_the_io_check_allows_pure_imports(source: str) -> None:
    assert io_uses(source) == []


def test_only_the_turn_runner_starts_threads() -> None:
    """The turn loop's threads (parallel tool calls) live in one shell module (issue 10)."""
    starting = sorted(
        m.name
        for m in PY_MODULES
        if (_under(m.name, TURN) or _under(m.name, TOOLS))
        and "Thread(" in m.path.read_text("utf-8")
    )
    assert starting == [f"{TURN}.runner"]


# ---- the tests/ tree (issue 20 item 4; issue 35 item 5) -----------------------------------------
# Tests mirror the package (tests/loopd/llama/ for boxmaker/loopd/llama/, ...) and stand on one
# support floor, tests/support/. A module of tests/ imports boxmaker, the libraries and
# tests.support only: never a conftest (fixtures reach a test by name), never another test_*
# module, never a rig beside it. What two test files share lives in tests/support, so each test
# file can be moved, split or deleted alone. tests/support imports no test package: it is the floor.

TESTS = "tests"
SUPPORT = "tests.support"
TEST_MODULES = sorted(
    (Module(_module_name(p), p) for p in Path(__file__).resolve().parent.rglob("*.py")),
    key=lambda m: m.name,
)
TEST_NAMES = frozenset(m.name for m in TEST_MODULES)


def _test_module_of(target: str) -> str:
    """The module of tests/ a dotted import names: `tests.a.test_b.Name` is tests.a.test_b."""
    parts = target.split(".")
    return next(
        (n for n in (".".join(parts[:i]) for i in range(len(parts), 0, -1)) if n in TEST_NAMES),
        target,
    )


def tree_faults(mod: Module, source: str | None = None) -> list[str]:
    """What a module of tests/ imports that the tests/ rules above forbid, one line each."""
    faults = []
    for imp in imports_of(mod, source):
        target = imp.target
        if not _under(target, TESTS) or _under(target, SUPPORT):
            continue
        where = f"{mod.rel}:{imp.line} imports {target}"
        leaf = _test_module_of(target).rpartition(".")[2]
        if leaf == "conftest":
            faults.append(f"{where}: a conftest; move what it shares into tests/support")
        elif _under(mod.name, SUPPORT):
            faults.append(f"{where}: tests/support is the floor and imports no test package")
        elif leaf.startswith("test_"):
            faults.append(f"{where}: another test module; share it from tests/support")
        else:
            faults.append(f"{where}: a helper outside tests/support; move it there")
    return faults


@pytest.mark.parametrize("mod", [m for m in TEST_MODULES if m.path.suffix == ".py"], ids=str)
def test_a_test_module_imports_only_its_floor(mod: Module) -> None:
    assert tree_faults(mod) == []


def test_the_tests_tree_is_seen() -> None:
    assert {"tests.support.stack", "tests.loopd.llama.test_gate", "tests.loopd.conftest"} <= (
        TEST_NAMES
    )


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("tests.loopd.test_cli", "from tests.loopd.conftest import Stack"),
        ("tests.inferproxy.test_idle", "from .conftest import BOUND"),
        ("tests.loopd.test_cli", "from tests.loopd import conftest"),
        ("tests.support.stack", "from tests.loopd.test_cli import X"),
        ("tests.support.serve", "import tests.loopd.test_cli"),
        ("tests.session.test_replay", "from tests.proto.test_log import records"),
        ("tests.loopd.test_config_bounds", "from tests.loopd.test_config import error"),
        ("tests.loopd.test_config_bounds", "from .test_config import error"),
        ("tests.bxctl.test_chat_pty_approval", "from tests.bxctl.test_chat_pty import Pty"),
        ("tests.bxctl.test_chat_pty_approval", "def f():\n    from .test_chat_pty import Pty"),
        ("tests.gatewayd.test_property", "from tests.gatewayd.test_e2e import BOT"),
        ("tests.bxctl.test_verify", "from tests.session import writer"),  # a helper beside them
        ("tests.brokerd.test_log", "import tests.brokerd"),  # a test package
    ],
)
def test_the_tests_rules_catch(name: str, source: str) -> None:
    assert len(tree_faults(_fake(name), source)) == 1


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("tests.loopd.llama.test_gate", "from tests.support.serve import turn\nimport boxmaker"),
        ("tests.support.serve", "from tests.support.turn import say"),
        ("tests.loopd.cache.test_keeper", "from tests.support.loopd.fake_slots import FakeSlots"),
        ("tests.loopd.cache.test_keeper", "from tests.support import procs"),
    ],
)
def test_the_tests_rules_allow(name: str, source: str) -> None:
    assert tree_faults(_fake(name), source) == []


def test_every_row_is_named_in_the_architecture_doc() -> None:
    """docs/architecture.md names each row of RULES (issue 30 item 8), as a dotted name or a
    path: a package added to the table is added to the doc too."""
    doc = (ROOT.parent / "docs" / "architecture.md").read_text()
    missing = []
    for row in RULES:
        if row == "boxmaker":
            continue
        parts = row.removeprefix("boxmaker.").split(".")
        # how the doc names a module: loopd/llama/client, llama/client.py, _cli, llama/{http,sse}
        suffixes = ["/".join(parts[i:]) for i in range(len(parts) - 1)]
        names = [row, *suffixes, *(f"{x}.py" for x in suffixes)]
        named = any(name in doc for name in names)
        if len(parts) == 1:
            named = named or re.search(rf"(?<![\w.]){re.escape(parts[0])}\b", doc) is not None
        else:
            listed = rf"{re.escape(parts[-2])}/\{{[^}}]*\b{re.escape(parts[-1])}\b"
            named = named or re.search(listed, doc) is not None
        if not named:
            missing.append(row)
    assert missing == [], f"rows of the layering table not named in docs/architecture.md: {missing}"
