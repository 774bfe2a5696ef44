"""An MCP server's memory as a whole (issue 37 item 8): a hostile server whose processes each hold
less than `memory_bytes` but together more is stopped with one clear result, however its
processes are arranged (children, a chain, threads, a new session, orphans), and nothing of it
is left running."""

from __future__ import annotations

import os

import pytest

from tests.support.brokerd.mcp.servers import Rig, hostile_server
from tests.support.procs import wait_for

CAP_MIB = 128
LIMITS = {
    "memory_bytes": CAP_MIB << 20,
    "call_timeout_ms": 30_000,  # the watch stops the server long before
    "restart_backoff_ms": 10,
    "restart_backoff_max_ms": 50,
}
MARK = "mode, n, mib = sys.argv"  # in every hog process's command line (hostile_server.HOG)


def hogs_alive() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if MARK.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.parametrize(
    ("mode", "count", "mib"),
    [
        ("fork", 4, 40),  # four children of the server
        ("chain", 4, 40),  # each the parent of the next
        ("setsid", 4, 40),  # each in a session and process group of its own
        ("orphan", 4, 40),  # each forks and exits: the pid namespace's init adopts them
        ("threads", 3, 50),  # three processes of two threads, 25 MiB each
    ],
)
def test_processes_that_pass_memory_bytes_together_stop_the_server(
    rig: Rig, mode: str, count: int, mib: int
) -> None:
    assert count * mib > CAP_MIB > mib  # each under the per-process limit, together over it
    m = rig.manager(hostile_server("evil", **LIMITS))
    assert m.call("evil.echo", {"target": "before"}, 0).content == "echo before"
    got = m.call("evil.hog", {"target": f"{mode}:{count}:{mib}:never"}, 0)
    assert f"over its memory_bytes of {CAP_MIB} MiB" in got.content, got.content
    assert "the server was stopped and restarts at its next call" in got.content
    assert rig.log_has(f"over its memory_bytes of {CAP_MIB} MiB")
    wait_for(lambda: not hogs_alive(), "every process of the stopped server gone")
    assert m.call("evil.echo", {"target": "after"}, 0).content == "echo after"
    assert m.servers["evil"].starts == 2


def test_a_server_under_memory_bytes_as_a_whole_runs_on(rig: Rig) -> None:
    m = rig.manager(hostile_server("evil", **LIMITS))
    got = m.call("evil.hog", {"target": "fork:2:30:after"}, 0)
    assert got.content == "held 2 x 30 MiB", got.content
    assert m.servers["evil"].starts == 1
    m.close()
    wait_for(lambda: not hogs_alive(), "the server's processes gone with it")
