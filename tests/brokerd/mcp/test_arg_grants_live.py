"""Argument constraints on real servers through the broker: what the grants allow reaches the
server, what they do not never does (a symlink in the workspace included)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from boxmaker.brokerd.broker import Broker
from tests.support.brokerd.mcp.git import GIT, make_repo
from tests.support.brokerd.mcp.servers import (
    Rig,
    broker_for,
    nobody_answers,
    page_server,
    python_server,
    sandbox_owned,
)


def call(b: Broker, tool: str, arguments: str) -> str:
    """One call in a fresh session: an MCP result taints its session, and the next call would
    ask for that reason, whatever its grant."""
    return b.call(tool, arguments, nobody_answers, session=os.urandom(6).hex()).content


@pytest.fixture
def git_broker(rig: Rig) -> Iterator[Broker]:
    make_repo(rig.workspace / "repo", "public-5e1f.txt")
    make_repo(rig.workspace / "secret", "secret-7a2c.txt")
    (rig.workspace / "open").mkdir()
    os.symlink("../secret", rig.workspace / "open" / "link")  # out of a granted folder
    sandbox_owned(rig.workspace)
    grants = """
[[grant]]
tool = "git.git_status"
mode = "allow"
args = { repo_path = { paths = ["repo", "open"] } }

[[grant]]
tool = "git.git_status"
mode = "deny"
args = { repo_path = { paths = ["secret"] } }
"""
    b = broker_for(rig, python_server("git", "mcp_server_git", workspace="ro", env=GIT), grants)
    try:
        yield b
    finally:
        b.close()


def test_git_reaches_the_granted_repository_only(git_broker: Broker) -> None:
    def status(path: str) -> str:
        return call(git_broker, "git.git_status", f'{{"repo_path": "{path}"}}')

    assert "public-5e1f.txt" in status("/workspace/repo")
    assert "public-5e1f.txt" in status("repo")  # relative: from the server's cwd, /workspace
    for path in ("secret", "/workspace/secret", "repo/../secret", "/workspace/../workspace/secret"):
        got = status(path)
        assert got.startswith("error: denied: grant: git.git_status deny"), (path, got)
    linked = status("open/link")  # under a granted folder as written, the secret as followed
    assert linked.startswith("error: refused: git.git_status's repo_path names open/link: a sym")
    assert "secret-7a2c" not in linked
    assert "secret-7a2c" not in status("open/link/.")


def test_fetch_reaches_the_granted_host_only(rig: Rig) -> None:
    """The server's `hosts` let it reach both pages: the grant's constraint alone keeps the
    model's call from the second one (asked, unanswered, refused)."""
    with page_server("127.0.0.1") as (port, hits), page_server("127.0.0.2") as (port2, hits2):
        servers = python_server(
            "web",
            "mcp_server_fetch",
            "--ignore-robots-txt",
            "--allow-private-ips",
            hosts=[f"127.0.0.1:{port}", f"127.0.0.2:{port2}"],
        )
        grants = '[[grant]]\ntool = "web.fetch"\nmode = "allow"\n'
        grants += 'args = { url = { hosts = ["127.0.0.1"] } }\n'
        b = broker_for(rig, servers, grants)
        try:

            def fetch(url: str) -> str:
                return call(b, "web.fetch", f'{{"url": "{url}", "raw": true}}')

            assert "page-3c1d" in fetch(f"http://127.0.0.1:{port}/granted")
            for url in (
                f"http://127.0.0.2:{port2}/other",
                f"http://127.0.0.1@127.0.0.2:{port2}/userinfo",
                f"http://0x7f000002:{port2}/hex",
                f"http://127.0.0.1%2f@127.0.0.2:{port2}/percent",
            ):
                got = fetch(url)
                assert got.startswith("error: denied: the owner did not approve (timeout)"), url
            assert hits == ["/granted"]
            assert hits2 == []
        finally:
            b.close()
