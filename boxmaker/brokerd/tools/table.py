"""The table of tools: every tool brokerd has, one row each (tools/kind.py says what a row holds).

To add a tool: write its file (schema, argument types, target, grant kind, what it reads and
writes, whether its answers are untrusted, its summary, its "always" rule, its run, and when it
has them its arguments' parser, its config section and its state's factory) and add its row to
`BUILTIN`. Tools named at run time (an MCP server's `<server>.<tool>`) come from a
`Family`: a prefix and a function that gives the row for a name under it, or None.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from boxmaker.brokerd.tools.clock import CLOCK
from boxmaker.brokerd.tools.fetch import FETCH
from boxmaker.brokerd.tools.files import EDIT_FILE, LIST_DIR, READ_FILE, WRITE_FILE
from boxmaker.brokerd.tools.find_files import FIND_FILES
from boxmaker.brokerd.tools.kind import Tool
from boxmaker.brokerd.tools.note import NOTE
from boxmaker.brokerd.tools.shell import SHELL

BUILTIN: tuple[Tool, ...] = (
    *(CLOCK, READ_FILE, LIST_DIR, WRITE_FILE, EDIT_FILE, NOTE, SHELL, FETCH),
    FIND_FILES,  # added last: the order loopd lists the others in stays
)

# True while a decision reads the table (under the decision log's lock): a family then gives
# only the rows it has and starts nothing (an MCP server's start can take its whole timeout).
DECIDING: contextvars.ContextVar[bool] = contextvars.ContextVar("deciding", default=False)


@contextlib.contextmanager
def deciding() -> Iterator[None]:
    token = DECIDING.set(True)
    try:
        yield
    finally:
        DECIDING.reset(token)


@dataclass(frozen=True, slots=True)
class Family:
    """Tools whose names are `<prefix><rest>`, known only at run time (an MCP server's)."""

    prefix: str  # "github." for the server "github"
    rows: Callable[[str], Tool | None]  # the full name -> its row, or None
    names: Callable[[], Iterable[str]]  # the names it has now
    # the row a grant names, looked up without starting anything (None: `rows`)
    grant_row: Callable[[str], Tool | None] | None = None
    # makes its rows ready (starts an MCP server): called before a decision, never in one
    prepare: Callable[[], None] | None = None


class Table:
    def __init__(self, tools: Iterable[Tool] = BUILTIN, families: Iterable[Family] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._families: list[Family] = []
        for tool in tools:
            self.add(tool)
        for family in families:
            self.add_family(family)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"two tools named {tool.name!r}")
        if (family := self._family_of(tool.name)) is not None:
            raise ValueError(f"{tool.name!r} overlaps the tool family {family.prefix!r}")
        self._tools[tool.name] = tool

    def add_family(self, family: Family) -> None:
        if not family.prefix or any(n.startswith(family.prefix) for n in self._tools):
            raise ValueError(f"the tool family {family.prefix!r} overlaps a tool's name")
        self._families.append(family)

    def _family_of(self, name: str) -> Family | None:
        return next((f for f in self._families if name.startswith(f.prefix)), None)

    def get(self, name: str) -> Tool | None:
        if (tool := self._tools.get(name)) is not None:
            return tool
        family = self._family_of(name)
        row = family.rows(name) if family is not None else None
        return row if row is not None and row.name == name else None

    def grant_row(self, name: str) -> Tool | None:
        """The row a grant names: `get`, but a family's rows as its `grant_row` gives them (an
        MCP server is not started because the grants name one of its tools)."""
        family = None if name in self._tools else self._family_of(name)
        if family is None or family.grant_row is None:
            return self.get(name)
        row = family.grant_row(name)
        return row if row is not None and row.name == name else None

    def prepare(self, name: str | None = None) -> None:
        """Makes ready the family of `name` (None: every family, at once): outside a
        decision, so that the decision reads rows that are there and waits for nothing."""
        if name is not None:
            family = None if name in self._tools else self._family_of(name)
            if family is not None and family.prepare is not None:
                family.prepare()
            return
        jobs = [f.prepare for f in self._families if f.prepare is not None]
        threads = [threading.Thread(target=job, daemon=True) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def grant_names(self) -> list[str]:
        """What a rule may name, for its error: the tools that need a grant, then each family
        as `<prefix><tool>` (listing its tools would start an MCP server)."""
        own = [n for n, t in self._tools.items() if t.needs_grant]
        return [*own, *(f"{f.prefix}<tool>" for f in self._families)]

    def names(self) -> tuple[str, ...]:
        dynamic = [n for f in self._families for n in f.names()]
        return (*self._tools, *dynamic)

    def own(self) -> list[Tool]:
        """The tools of the table itself, no family's (what a failing family leaves)."""
        return list(self._tools.values())

    def sections(self) -> dict[str, type]:
        """Each own tool's config section by name: what `[broker.<name>]` may hold."""
        return {n: t.section for n, t in self._tools.items() if t.section is not None}

    def tools(self) -> list[Tool]:
        return [t for n in self.names() if (t := self.get(n)) is not None]


TABLE = Table()
