"""mcp/memory.py, the sans-IO part of a server's memory watch: /proc/<pid>/stat lines as the
kernel writes them, and trees of processes."""

from __future__ import annotations

import os

import pytest

from boxmaker.brokerd.mcp.memory import parse_stat, tree, tree_bytes


def stat_line(pid: int, comm: str, ppid: int, rss: int) -> str:
    # fields 3..52 of proc(5): state, ppid, then 19 more before rss (field 24)
    rest = ["S", str(ppid), *["0"] * 19, str(rss), *["0"] * 28]
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


@pytest.mark.parametrize(
    "comm",
    [
        "python3",
        "a b",
        "x) S 1 2 3",
        "((",
        ")",
        "",
        "evil) R 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 999",
    ],
)
def test_a_command_name_cannot_forge_the_fields(comm: str) -> None:
    assert parse_stat(stat_line(7, comm, 3, 1234)) == (3, 1234)


@pytest.mark.parametrize("line", ["", "7 (x)", "7 (x) S notanumber", "garbage", "7 (x) S 1 2"])
def test_a_line_that_does_not_parse_is_none(line: str) -> None:
    assert parse_stat(line) is None


def test_this_process_reads_as_itself() -> None:
    with open("/proc/self/stat") as f:
        got = parse_stat(f.read())
    assert got is not None
    assert got[0] == os.getppid()
    assert got[1] > 0


def test_the_tree_follows_parents_only() -> None:
    parents = {10: 1, 11: 10, 12: 11, 13: 12, 20: 1, 21: 20, 30: 13}
    assert tree(10, parents) == {10, 11, 12, 13, 30}
    assert tree(20, parents) == {20, 21}
    assert tree(99, parents) == {99}
    looped = {5: 6, 6: 5}  # cannot happen in /proc; still ends
    assert tree(5, looped) == {5, 6}


def test_the_sum_is_the_trees_alone() -> None:
    rows = [(10, 1, 100), (11, 10, 50), (12, 11, 25), (20, 1, 1000), (21, 20, 7)]
    assert tree_bytes(10, rows, 4096) == (175 * 4096, 3)
    assert tree_bytes(20, rows, 4096) == (1007 * 4096, 2)
    assert tree_bytes(42, rows, 4096) == (0, 0)  # gone: nothing held
