"""Issue 37 class 8, broker.sock's `list`: one family of tools (an MCP server's) can never make
it fail. Whatever a family gives (an exception, a tool too big for a frame, one that is not
JSON, more than a frame holds), the answer is one frame with the builtins first."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker._daemon.log import DaemonLog
from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.config import BrokerConfig
from boxmaker.brokerd.serve import Server
from boxmaker.brokerd.tools.kind import GrantKind, Tool
from boxmaker.brokerd.tools.table import BUILTIN, Family, Table
from boxmaker.proto import ToolSchema
from boxmaker.proto.frame import MAX_FRAME_BYTES

BUILTINS = {"clock", "fetch"}  # listed with no grant: fetch asks by default


def row(name: str, description: str = "", parameters: object = None) -> Tool:
    schema = ToolSchema(name, description, parameters or {"type": "object"})  # type: ignore[arg-type]
    return Tool(
        schema, {}, lambda *_a: None,  # type: ignore[arg-type]
        lambda *_a: name, GrantKind.ARGS, lambda _args, _ws: "", asks_by_default=True,
    )  # fmt: skip


def family(prefix: str, tools: Callable[[], list[Tool]]) -> Family:
    def rows(name: str) -> Tool | None:
        return next((t for t in tools() if t.name == name), None)

    return Family(f"{prefix}.", rows, lambda: [t.name for t in tools()])


def raising(exc: BaseException) -> Callable[[], list[Tool]]:
    def tools() -> list[Tool]:
        raise exc

    return tools


CASES: dict[str, Callable[[], list[Tool]]] = {
    "raises": raising(RuntimeError("a server's listing broke")),
    "recursion": raising(RecursionError("deep")),
    "one_huge": lambda: [row("one_huge.t", "d" * (MAX_FRAME_BYTES + 10))],
    "not_json": lambda: [row("not_json.t", "", {"type": "object", "x": {1, 2}})],
    "too_many": lambda: [row(f"too_many.t{i}", "d" * 10_000) for i in range(300)],
}


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[[str], Server]]:
    made: list[Broker] = []

    def server(case: str) -> Server:
        (tmp_path / "ws").mkdir(exist_ok=True)
        (tmp_path / "grants.toml").write_text("")
        config = BrokerConfig(
            socket=str(tmp_path / "b.sock"),
            owner_socket=str(tmp_path / "o.sock"),
            workspace=str(tmp_path / "ws"),
            grants=str(tmp_path / "grants.toml"),
            home=str(tmp_path / "home"),
            log=str(tmp_path / "log" / f"{case}.jsonl"),
        )
        table = Table(BUILTIN, [family(case, CASES[case]), family("good", lambda: [row("good.t")])])
        made.append(Broker(config, table=table))
        return Server(made[-1], DaemonLog("brokerd", io.StringIO(), io.StringIO()))

    yield server
    for b in made:
        b.close()


@pytest.mark.parametrize("case", sorted(CASES))
def test_list_is_one_frame_with_the_builtins_whatever_a_family_gives(
    make: Callable[[str], Server], case: str
) -> None:
    tools = make(case).tool_list()
    names = [str(t["name"]) for t in tools]
    assert set(names[: len(BUILTINS)]) == BUILTINS, names  # the builtins, first
    assert len(orjson.dumps({"tools": tools})) < MAX_FRAME_BYTES
