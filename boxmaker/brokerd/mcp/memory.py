"""The memory an MCP server holds as a whole: its process and every descendant. [core]

RLIMIT_AS bounds each process alone; four children under it held 2.4 GB together (issue 37 item
8). brokerd reads every process's parent and resident size (`/proc/<pid>/stat`, readable by any
uid: the one-user, two-user and root deployments alike, no cgroup needed) and sums the tree under
the server's sandbox. Nothing leaves that tree: the sandbox has its own pid namespace, so a
process whose parent exits is adopted by the namespace's init (bwrap's child), and `setsid`
changes the session, never the parent. Resident pages shared by several processes count once
per process: the sum is never less than what the server holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

RSS_FIELD = 21  # of the fields after the command's ")": state is 0, ppid 1, rss (pages) 21


def parse_stat(text: str) -> tuple[int, int] | None:
    """(parent pid, resident pages) from one `/proc/<pid>/stat`, or None if it does not parse
    (the command's name may hold spaces and parentheses: it is read up to the last ")")."""
    fields = text.rpartition(")")[2].split()
    if len(fields) <= RSS_FIELD:
        return None
    try:
        return int(fields[1]), max(0, int(fields[RSS_FIELD]))
    except ValueError:
        return None


def tree(root: int, parents: Mapping[int, int]) -> set[int]:
    """`root` and every process whose chain of parents reaches it."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tree_bytes(root: int, table: Iterable[tuple[int, int, int]], page: int) -> tuple[int, int]:
    """(resident bytes, processes) of `root`'s tree, from rows of (pid, parent pid, pages)."""
    rows = list(table)
    members = tree(root, {pid: ppid for pid, ppid, _ in rows})
    pages = sum(rss for pid, _, rss in rows if pid in members)
    return pages * page, len(members & {pid for pid, _, _ in rows})
