"""Issue 37 item 7, its MCP half: a server with `workspace = "rw"` writes under shell's write
quota ([broker.shell] write_bytes). What one call adds is counted as it runs; past the quota
the server is stopped and the call's result says so (one wrote 300 MiB in a call before)."""

from __future__ import annotations

import os

import pytest

from tests.support.brokerd.mcp.servers import Rig, hostile_server, sandbox_owned

FAST = {"restart_backoff_ms": 10, "restart_backoff_max_ms": 50}
MIB = 1 << 20
QUOTA = 8 * MIB


def total(rig: Rig) -> int:
    return sum(
        os.lstat(os.path.join(root, n)).st_blocks * 512
        for root, dirs, files in os.walk(rig.workspace)
        for n in dirs + files
    )


@pytest.mark.parametrize(
    "target",
    [
        "/workspace/big:300",  # the case, in one call
        "/workspace/deep/er/big:64",
        "/workspace/.hidden/big:64",
        "/workspace/h/big:64:0300",  # then a folder brokerd's walk must make enterable
        "/workspace/h/big:64:0000",
    ],
)
def test_an_rw_server_writing_past_the_quota_is_stopped(rig: Rig, target: str) -> None:
    sandbox_owned(rig.workspace)
    m = rig.manager(hostile_server("evil", workspace="rw", **FAST), write_bytes=QUOTA)
    got = m.call("evil.fill", {"target": target}, 0)
    assert "over the quota of 8388608 ([broker.shell] write_bytes)" in got.content, got.content
    assert "the server was stopped" in got.content
    assert total(rig) < 300 * MIB  # stopped as it wrote: never the whole of a 300 MiB call
    again = m.call("evil.echo", {"target": "back"}, 0)
    assert again.content == "echo back", again.content  # restarted at its next call


def test_an_rw_server_under_the_quota_is_left_alone(rig: Rig) -> None:
    sandbox_owned(rig.workspace)
    m = rig.manager(hostile_server("evil", workspace="rw", **FAST), write_bytes=QUOTA)
    for i in range(3):  # each call has the whole quota: 3 x 4 MiB, none over
        got = m.call("evil.fill", {"target": f"/workspace/f{i}:4"}, 0)
        assert got.content == f"filled /workspace/f{i}: 4 MiB", got.content
