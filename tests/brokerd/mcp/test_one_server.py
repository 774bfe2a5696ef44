"""Issue 37 class 8: one server cannot take brokerd down for everyone. A server that never
answers `initialize` is started outside the decision and its lock, so builtins and other
servers answer meanwhile; a listing over its bounds is refused whole (one line) and the rest are
listed; unasked messages are counted whatever brokerd answers, and a flood is stopped; a
`tools/list_changed` storm lists again at most once per RELIST_S."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.mcp.server import MAX_LISTING_BYTES, MAX_TOOLS, RELIST_S
from tests.support.brokerd.mcp.servers import Rig, broker_for, hostile_server, nobody_answers
from tests.support.procs import wait_for

FAST = {"restart_backoff_ms": 10, "restart_backoff_max_ms": 50}
START_MS = 6000  # the hanging server's start_timeout_ms
PROMPT_S = START_MS / 2000  # a builtin's answer meanwhile: far under the start's wait
GRANTS = "".join(
    f'[[grant]]\ntool = "{t}"\nmode = "allow"\n'
    for t in ("read_file", "list_dir", "write_file", "good.echo", "slow.echo")
)


@pytest.fixture
def two(rig: Rig) -> Iterator[Broker]:
    (rig.workspace / "notes.txt").write_text("builtin-4c2a\n")
    os.chmod(rig.workspace, 0o777)
    servers = {
        **hostile_server("slow", "--hang-at-start", start_timeout_ms=START_MS),
        **hostile_server("good", **FAST),
    }
    b = broker_for(rig, servers, GRANTS)
    try:
        yield b
    finally:
        b.close()


BUILTINS = [
    ("read_file", {"path": "notes.txt"}, "builtin-4c2a"),
    ("list_dir", {"path": "."}, "notes.txt"),
    ("clock", {}, "20"),
    ("write_file", {"path": "out.txt", "content": "x"}, "wrote"),
    ("good.echo", {"target": "other-server"}, "echo other-server"),
]


def test_a_server_that_never_answers_stalls_no_one_else(rig: Rig, two: Broker) -> None:
    stalled: list[str] = []
    slow = threading.Thread(
        target=lambda: stalled.append(
            two.call("slow.echo", '{"target": "x"}', nobody_answers, session="s-slow").content
        ),
        daemon=True,
    )
    slow.start()
    server = rig.managers[-1].servers["slow"]
    wait_for(lambda: server.starts >= 1, "the slow server's start under way")
    for n, (tool, args, said) in enumerate(BUILTINS):
        started = time.monotonic()
        got = two.call(tool, json.dumps(args), nobody_answers, session=f"s{n}")
        took = time.monotonic() - started
        assert said in got.content, (tool, got.content)
        assert took < PROMPT_S, (tool, took)
    assert slow.is_alive()  # the builtins were answered while it was still starting
    slow.join(START_MS / 1000 * 3)
    assert stalled
    assert stalled[0].startswith("error: denied: bad request: brokerd has no tool"), stalled
    assert rig.log_has("mcp slow: its tools are left out for now: no answer to initialize")


LISTINGS: dict[str, tuple[str, ...]] = {
    "count": ("--many-tools", f"{MAX_TOOLS + 1}:10"),
    "thousands": ("--many-tools", "5000:0"),
    "bytes": ("--many-tools", f"20:{60_000}"),
    "one_big": ("--many-tools", f"4:{MAX_LISTING_BYTES // 3}"),
    "pages_of_bytes": ("--many-tools", f"{MAX_TOOLS}:{MAX_LISTING_BYTES // MAX_TOOLS + 100}"),
}


def test_a_listing_over_its_bounds_is_refused_and_the_rest_listed(rig: Rig) -> None:
    servers: dict[str, Any] = {"good": hostile_server("good")["good"]}
    for name, args in LISTINGS.items():
        servers.update(hostile_server(name, *args))
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(70):
        deep = {"type": "object", "properties": {"a": deep}}
    extra = json.dumps([{"name": "deep", "inputSchema": deep}])
    servers.update(hostile_server("nested", "--extra-tools", extra))
    b = broker_for(rig, servers, GRANTS.replace("slow.echo", "good.echo"))
    try:
        started = time.monotonic()
        names = [t.name for t in b.tools()]
        took = time.monotonic() - started
    finally:
        b.close()
    assert "read_file" in names
    assert "good.echo" in names
    assert "nested.echo" in names  # its other tools stay
    assert "nested.deep" not in names
    for name in LISTINGS:
        assert not any(n.startswith(f"{name}.") for n in names), name
        lines = [x for x in rig.logged if x.startswith(f"mcp {name}: its listing is refused")]
        assert len(lines) == 1, (name, rig.logged)
    assert took < 60, took


FLOODS = [
    "ping",  # brokerd's SDK answers each: that answer once reset the count
    "roots/list",  # refused by the SDK, an answer too
    "notifications/tools/list_changed",  # each made brokerd list again: a request
    "notifications/message",
    "notifications/progress",
]


@pytest.mark.parametrize("method", FLOODS)
def test_an_idle_flood_is_counted_and_stopped(rig: Rig, method: str) -> None:
    m = rig.manager(hostile_server("evil", flood_messages=200, **FAST))
    assert m.call("evil.idle_flood", {"target": method}, 0).content == "flooding"
    started = time.monotonic()
    wait_for(lambda: rig.log_has("messages nobody asked for (a flood)"), "the flood stopped")
    took = time.monotonic() - started
    relists = [x for x in rig.logged if "its tools changed" in x]
    assert len(relists) <= took / RELIST_S + 2, (len(relists), took)
    assert m.call("evil.echo", {"target": "back"}, 0).content == "echo back"  # restarted
