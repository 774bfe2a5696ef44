"""A hostile MCP server in brokerd's sandbox: what it tries, and the one result each gets."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from boxmaker.brokerd.mcp.manager import McpManager
from tests.support.brokerd.mcp.servers import Rig, hostile_server, sandbox_owned
from tests.support.brokerd.sandbox import Listener
from tests.support.procs import wait_for

CANARY = "canary-51be-do-not-leak"
FAST = {"restart_backoff_ms": 10, "restart_backoff_max_ms": 50}


@pytest.fixture
def evil(rig: Rig) -> McpManager:
    return rig.manager(hostile_server("evil", "--bad-schemas", **FAST))


def test_tools_with_bad_schemas_are_left_out_with_a_warning(rig: Rig, evil: McpManager) -> None:
    names = [t.name for t in evil.list_tools(0)]
    assert "evil.echo" in names
    for bad in ("bad_type", "bad_schema", "dotted.name", "no_schema"):
        assert not any(bad in n for n in names)
        assert rig.log_has(f"mcp evil: tool {bad} left out") or rig.log_has(f"'{bad}' left out")
    assert evil.call("evil.echo", {"target": "x"}, 0).content == "echo x"


@pytest.mark.parametrize("workspace", ["none", "ro"])
def test_it_reads_no_host_file_it_was_not_given(rig: Rig, workspace: str) -> None:
    secret = rig.base / "secret.txt"
    secret.write_text(CANARY)
    os.chmod(secret, 0o644)  # world-readable: only the mounts can keep it out
    (rig.workspace / "mine.txt").write_text("given\n")
    m = rig.manager(hostile_server("evil", workspace=workspace, **FAST))
    for path in (
        "/etc/shadow",
        "/etc/gshadow",
        "/root/.bashrc",
        str(secret),
        str(rig.base / "run"),
        "/proc/1/root/etc/shadow",
        "/var/log/syslog",
    ):
        got = m.call("evil.read_file", {"target": path}, 0)
        assert "read: FAILED" in got.content, (path, got.content)
        assert CANARY not in got.content
    given = m.call("evil.read_file", {"target": "/workspace/mine.txt"}, 0).content
    assert ("read: OK given" in given) is (workspace == "ro"), given


@pytest.fixture
def listeners(rig: Rig) -> Iterator[list[Listener]]:
    made = [
        Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
        Listener(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0)),
        Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(rig.base / "host.sock")),
        Listener(socket.AF_UNIX, socket.SOCK_STREAM, f"\0boxmaker-mcp-test-{os.getpid()}"),
    ]
    yield made
    for listener in made:
        listener.close()


def targets(listeners: list[Listener]) -> list[str]:
    tcp, udp, unix, abstract = listeners
    return [
        f"tcp:127.0.0.1:{tcp.address[1]}",
        f"tcp:127.0.0.2:{tcp.address[1]}",
        f"udp:127.0.0.1:{udp.address[1]}",
        f"unix:{unix.address}",
        f"unix:@{abstract.address[1:].decode()}",
        "tcp:1.1.1.1:53",
    ]


@pytest.mark.parametrize("hosts", [[], ["127.0.0.1:1"]])
def test_it_connects_nowhere_directly(
    rig: Rig, listeners: list[Listener], hosts: list[str]
) -> None:
    """No hosts: no network at all. With hosts, only the proxy's port leads out, so a direct
    connection (even to a granted address) stays inside the sandbox's own namespace."""
    m = rig.manager(hostile_server("evil", hosts=hosts, **FAST))
    for target in targets(listeners):
        got = m.call("evil.connect", {"target": target}, 0)
        assert ": OK" not in got.content or target.startswith("udp"), (target, got.content)
    time.sleep(0.2)  # a datagram in flight would be in `seen` by now
    assert [lst.seen for lst in listeners] == [[], [], [], []]


@pytest.mark.parametrize("workspace", ["none", "ro"])
def test_it_cannot_plant_a_setuid_file(rig: Rig, workspace: str) -> None:
    sandbox_owned(rig.workspace)
    m = rig.manager(hostile_server("evil", workspace=workspace, **FAST))
    for path in ("/workspace/planted", "/usr/planted", "/planted", "/etc/planted"):
        got = m.call("evil.plant_setuid", {"target": path}, 0)
        assert "plant: FAILED" in got.content, (path, got.content)
    assert list(rig.workspace.iterdir()) == []


# With workspace = "rw" a server writes the workspace, so it can set a set-uid bit there (its
# own file; the sandbox's mount is nosuid, the host's is not): brokerd clears it after the call.
RW_PLANTS = ["planted", "sub/planted", "deep/er/planted", ".hidden", "naïve name"]


def test_a_setuid_file_planted_in_an_rw_workspace_keeps_no_setuid_bit(rig: Rig) -> None:
    for folder in ("sub", "deep/er"):
        (rig.workspace / folder).mkdir(parents=True)
    sandbox_owned(rig.workspace)
    m = rig.manager(hostile_server("evil", workspace="rw", **FAST))
    for name in RW_PLANTS:
        got = m.call("evil.plant_setuid", {"target": f"/workspace/{name}"}, 0)
        assert "plant: OK 0o104755" in got.content, (name, got.content)  # it was set inside
        mode = os.lstat(rig.workspace / name).st_mode
        assert mode & 0o6000 == 0, (name, oct(mode))
        assert mode & 0o777 == 0o755, (name, oct(mode))  # the other bits are kept


@pytest.mark.parametrize("method", ["sampling/createMessage", "roots/list", "elicitation/create"])
def test_what_it_asks_of_brokerd_is_refused(rig: Rig, evil: McpManager, method: str) -> None:
    got = evil.call("evil.ask", {"target": method}, 0)
    assert got.content.startswith("ANSWER "), got.content
    assert '"error"' in got.content
    assert '"result"' not in got.content
    server = evil.servers["evil"]
    assert server.last is not None
    assert server.last.transport is not None
    assert server.last.transport.asked == [method]
    assert rig.log_has(f"mcp evil: asked for {method}: refused")
    assert server.starts == 1  # asking is not a fault


FAULTS: list[tuple[str, dict[str, Any], str]] = [
    ("garbage", {}, "sent a line that is not JSON-RPC"),
    ("unasked_answer", {}, "answered a request it was not sent (id 987654)"),
    ("flood", {}, "messages nobody asked for (a flood)"),
    ("hang", {}, "no answer within 1500 ms"),
    ("oversize", {"target": str(200_000)}, "a message over the cap of 65536 bytes"),
    ("die", {}, "exited (status 3)"),
]


@pytest.mark.parametrize(("tool", "args", "why"), FAULTS)
def test_a_fault_is_one_result_and_a_restart(
    rig: Rig, tool: str, args: dict[str, Any], why: str
) -> None:
    limits = {"call_timeout_ms": 1500, "message_cap_bytes": 65536, "flood_messages": 100}
    m = rig.manager(hostile_server("evil", **FAST, **limits))
    assert m.call("evil.echo", {"target": "before"}, 0).content == "echo before"
    got = m.call(f"evil.{tool}", args, 0)
    assert why in got.content, got.content
    assert "the server was stopped and restarts at its next call" in got.content
    assert got.untrusted  # the reason may quote the server's bytes
    assert rig.log_has(why)
    assert m.call("evil.echo", {"target": "after"}, 0).content == "echo after"
    assert m.servers["evil"].starts == 2


def test_a_result_over_the_cap_is_cut_not_a_fault(rig: Rig) -> None:
    m = rig.manager(hostile_server("evil", result_cap_bytes=1024, **FAST))
    got = m.call("evil.big_text", {"target": "100000"}, 0)
    assert got.truncated
    assert got.content.startswith("y" * 1024)
    assert len(got.content.encode()) < 1100
    assert m.servers["evil"].starts == 1


def test_results_taint(rig: Rig, evil: McpManager) -> None:
    got = evil.call("evil.inject", {}, 0)
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in got.content
    assert got.untrusted


def test_changed_tools_wait_for_the_next_epoch(rig: Rig) -> None:
    start_ms = 5000  # the bound on listing again after tools/list_changed
    evil = rig.manager(hostile_server("evil", start_timeout_ms=start_ms, **FAST))
    assert "evil.late_tool" not in [t.name for t in evil.list_tools(0)]
    assert evil.call("evil.change_tools", {}, 0).content == "changed"
    wait_for(
        lambda: any(t.name == "evil.late_tool" for t in evil.tools.latest.get("evil", ())),
        "the server listed again after tools/list_changed",
        timeout=start_ms / 1000 + 5,
    )
    assert "evil.late_tool" not in [t.name for t in evil.list_tools(0)]
    refused = evil.call("evil.late_tool", {}, 0)
    assert "not one of this epoch's tools" in refused.content
    assert "evil.late_tool" in [t.name for t in evil.list_tools(1)]
    assert evil.call("evil.late_tool", {}, 1).content == "late"
    assert rig.log_has("its tools changed; the new list holds from the next epoch")


def test_unknown_names_and_bad_arguments_are_results(rig: Rig, evil: McpManager) -> None:
    assert "no MCP server has this tool" in evil.call("nope.echo", {}, 0).content
    assert "not one of this epoch's tools" in evil.call("evil.nope", {}, 0).content
    assert "is not of type 'string'" in evil.call("evil.echo", {"target": 1}, 0).content
    assert evil.servers["evil"].starts == 1


def test_a_server_that_cannot_start_is_a_result(rig: Rig) -> None:
    m = rig.manager({"gone": {"command": "/usr/bin/no-such-mcp-server"}, **hostile_server()})
    assert [t.name for t in m.list_tools(0) if t.name.startswith("gone.")] == []
    assert rig.log_has("mcp: a server's tools are left out of epoch 0")
    assert "no MCP server has this tool" not in m.call("gone.x", {}, 0).content
    assert m.call("evil.echo", {"target": "ok"}, 0).content == "echo ok"


def test_its_stderr_is_logged_up_to_its_bound(rig: Rig) -> None:
    m = rig.manager(hostile_server("evil", stderr_bytes=2048, **FAST))
    assert m.call("evil.stderr_flood", {}, 0).content == "noisy"
    wait_for(lambda: rig.log_has("the rest of this run dropped"), "the stderr cut line")
    noise = [line for line in rig.logged if "noise line" in line]
    assert 0 < len(noise) <= 2048 // 60 + 1
    assert m.call("evil.echo", {"target": "still"}, 0).content == "echo still"


def test_a_server_dying_at_start_is_retried_only_after_a_growing_backoff(rig: Rig) -> None:
    backoff = {"restart_backoff_ms": 400, "restart_backoff_max_ms": 800}
    m = rig.manager(hostile_server("evil", "--exit-at-start", **backoff))
    waits = []
    for epoch in range(4):
        started = time.monotonic()
        assert m.list_tools(epoch) == []
        waits.append(time.monotonic() - started)
    assert m.servers["evil"].starts == 4
    # The first start is at once; then 400 ms, 800 ms, and 800 ms (the ceiling) before each.
    assert waits[1] >= 0.4
    assert waits[2] >= 0.8
    assert waits[3] >= 0.8
    assert rig.log_has("exited (status 5)")
    assert rig.log_has("hostile: exiting at start")


def test_it_sees_none_of_brokerds_environment(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOXMAKER_TEST_SECRET", CANARY)
    m = rig.manager(hostile_server("evil", env={"GIVEN": "yes"}, **FAST))
    env = m.call("evil.environ", {}, 0).content
    assert CANARY not in env
    assert '"GIVEN": "yes"' in env
    assert '"HOME": "/tmp"' in env
    assert "HTTP_PROXY" not in env  # no hosts: no proxy either


def test_it_is_killed_with_everything_it_started(rig: Rig) -> None:
    m = rig.manager(hostile_server("evil", hosts=["127.0.0.1:1"], **FAST))
    assert m.call("evil.spawn_sleeper", {}, 0).content.startswith("sleeper ")
    conn = m.servers["evil"].last
    assert conn is not None
    assert conn.transport is not None
    assert conn.transport.proc is not None
    tree = descendants(conn.transport.proc.pid)
    assert len(tree) >= 5  # bwrap, its init, the bridge, the server, the sleeper
    m.close()
    # bwrap's group is killed; its children die with it (PDEATHSIG, then the pid namespace's
    # init); the manager's close waits up to 5 s for bwrap
    wait_for(lambda: not any(alive(pid) for pid in tree), "the sandbox's processes gone")


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[1])


def descendants(root: int) -> list[int]:
    pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    tree = [root]
    grew = True
    while grew:
        grew = False
        for pid in pids:
            if pid not in tree and parent_of(pid) in tree:
                tree.append(pid)
                grew = True
    return tree


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_calls_from_two_threads_interleave(rig: Rig, evil: McpManager) -> None:
    results: dict[str, str] = {}

    def one(tag: str) -> None:
        results[tag] = evil.call("evil.slow_echo", {"target": tag}, 0).content

    threads = [threading.Thread(target=one, args=(t,)) for t in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {"a": "slow a", "b": "slow b", "c": "slow c"}
    assert evil.servers["evil"].starts == 1


def test_its_egress_socket_is_reached_in_the_managers_own_runtime_folder(rig: Rig) -> None:
    m = rig.manager(hostile_server("evil", hosts=["127.0.0.1:1"], **FAST), own_runtime=True)
    assert m.call("evil.echo", {"target": "x"}, 0).content == "echo x"  # bwrap bound the socket
    got = m.call("evil.connect", {"target": "tcp:127.0.0.1:3128"}, 0)  # the bridge's port
    assert "tcp: OK" in got.content, got.content
