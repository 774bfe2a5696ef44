"""Issue 37 class 2: an MCP server that sees the workspace reads all of it, so while the grants
deny read_file or list_dir anything, its calls ask as `shell`'s do (`reads_all_as`), and an
argument naming a denied path is denied (`denied_as`). The real mcp-server-git, and the hostile
server reading the file itself."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.brokerd.broker import Broker
from tests.support.brokerd.mcp.git import GIT, git
from tests.support.brokerd.mcp.servers import (
    Rig,
    broker_for,
    hostile_server,
    nobody_answers,
    python_server,
    sandbox_owned,
)

SECRET = "key-material-8e4b-do-not-show"
GIT_TOOLS = (
    "git_show",
    "git_status",
    "git_diff_staged",
    "git_diff",
    "git_diff_unstaged",
    "git_add",
)
ALLOW_GIT = "".join(f'[[grant]]\ntool = "git.{t}"\nmode = "allow"\n' for t in GIT_TOOLS)
ALLOW_READS = (
    '[[grant]]\ntool = "read_file"\nmode = "allow"\n[[grant]]\ntool = "list_dir"\nmode = "allow"\n'
)
DENIES = {
    "read_file": '[[grant]]\ntool = "read_file"\nmode = "deny"\npaths = ["secrets"]\n',
    "list_dir": '[[grant]]\ntool = "list_dir"\nmode = "deny"\npaths = ["secrets"]\n',
    "read_file files": '[[grant]]\ntool = "read_file"\nmode = "deny"\nfiles = ["secrets/key"]\n',
}
CALLS = [
    ("git.git_show", {"repo_path": "/workspace", "revision": "HEAD"}),
    ("git.git_status", {"repo_path": "/workspace"}),
    ("git.git_diff_staged", {"repo_path": "/workspace"}),
    ("git.git_diff", {"repo_path": "/workspace", "target": "HEAD~1"}),
    ("git.git_diff_unstaged", {"repo_path": "."}),
    ("git.git_add", {"repo_path": "/workspace", "files": ["secrets/key"]}),
]


def repo(ws: Path) -> None:
    git(ws, "init", "-q", "-b", "main")
    (ws / "readme.txt").write_text("public\n")
    git(ws, "add", "readme.txt")
    git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    (ws / "secrets").mkdir()
    (ws / "secrets" / "key").write_text(SECRET + "\n")
    git(ws, "add", "secrets/key")
    git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "add the key")
    (ws / "secrets" / "key").write_text(SECRET + " changed\n")
    sandbox_owned(ws)


def call(b: Broker, tool: str, args: Any) -> str:
    return b.call(tool, orjson.dumps(args).decode(), nobody_answers, os.urandom(6).hex()).content


@pytest.fixture
def make_broker(rig: Rig) -> Iterator[object]:
    repo(rig.workspace)
    made: list[Broker] = []

    def make(grants: str) -> Broker:
        server = python_server("git", "mcp_server_git", workspace="ro", env=GIT)
        made.append(broker_for(rig, server, grants))
        return made[-1]

    yield make
    for b in made:
        b.close()


@pytest.mark.parametrize("deny", sorted(DENIES))
def test_a_git_server_asks_while_a_read_is_denied(make_broker: object, deny: str) -> None:
    b = make_broker(ALLOW_READS + ALLOW_GIT + DENIES[deny])  # type: ignore[operator]
    for tool, args in CALLS:
        got = call(b, tool, args)
        assert got.startswith("error: denied: the owner did not approve"), (tool, got)
        assert SECRET not in got


def test_without_a_deny_the_git_server_runs_as_granted(make_broker: object) -> None:
    """The control: the same calls allowed, the secret reachable (what the asks keep back)."""
    b = make_broker(ALLOW_READS + ALLOW_GIT)  # type: ignore[operator]
    shown = call(b, "git.git_show", {"repo_path": "/workspace", "revision": "HEAD"})
    assert SECRET in shown, shown
    for tool, args in CALLS[1:-1]:
        assert not call(b, tool, args).startswith("error: denied"), tool


@pytest.mark.parametrize(
    "path", ["secrets", "/workspace/secrets", "./secrets/", "secrets/key", "secrets//sub/x"]
)
def test_an_argument_naming_a_denied_path_is_denied(make_broker: object, path: str) -> None:
    b = make_broker(ALLOW_READS + ALLOW_GIT + DENIES["read_file"])  # type: ignore[operator]
    got = call(b, "git.git_status", {"repo_path": path})
    assert got.startswith("error: denied: git.git_status on secrets"), got


@pytest.mark.parametrize(("workspace", "asks"), [("ro", True), ("rw", True), ("none", False)])
def test_a_server_that_reads_the_file_itself(rig: Rig, workspace: str, asks: bool) -> None:
    (rig.workspace / "secrets").mkdir()
    (rig.workspace / "secrets" / "key").write_text(SECRET)
    sandbox_owned(rig.workspace)
    grants = (
        ALLOW_READS + DENIES["read_file"] + '[[grant]]\ntool = "evil.read_file"\nmode = "allow"\n'
    )
    b = broker_for(rig, hostile_server("evil", workspace=workspace), grants)
    try:
        got = call(b, "evil.read_file", {"target": "/workspace/secrets/../secrets/key"})
        assert got.startswith("error: denied: the owner did not approve") is asks, got
        assert SECRET not in got
        plain = call(b, "evil.read_file", {"target": "/etc/hostname"})
        assert plain.startswith("error: denied: the owner did not approve") is asks, plain
    finally:
        b.close()
