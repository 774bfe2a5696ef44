"""Real MCP servers from PyPI, each in brokerd's sandbox, through the manager."""

from __future__ import annotations

from tests.support.brokerd.mcp.git import git
from tests.support.brokerd.mcp.servers import Rig, page_server, python_server, sandbox_owned

SAFE_GIT = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}


def test_mcp_server_time_lists_and_answers_untrusted(rig: Rig) -> None:
    m = rig.manager(python_server("time", "mcp_server_time"))
    names = [t.name for t in m.list_tools(0)]
    assert "time.get_current_time" in names
    assert "time.convert_time" in names
    got = m.call("time.get_current_time", {"timezone": "UTC"}, 0)
    assert '"timezone": "UTC"' in got.content
    assert got.untrusted  # not marked trusted: its results taint the session
    bad = m.call("time.get_current_time", {"timezone": 3}, 0)
    assert "is not of type 'string'" in bad.content  # checked against the listed schema
    assert m.servers["time"].starts == 1


def test_a_trusted_server_does_not_taint(rig: Rig) -> None:
    m = rig.manager(python_server("time", "mcp_server_time", trusted=True))
    assert not m.call("time.get_current_time", {"timezone": "UTC"}, 0).untrusted


def test_mcp_server_git_reads_a_read_only_workspace_and_cannot_write_it(rig: Rig) -> None:
    repo = rig.workspace / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    (repo / "a.txt").write_text("two\n")
    sandbox_owned(repo)  # even as its owner, the sandbox may not write a read-only workspace
    before = git(repo, "rev-parse", "HEAD")
    table = python_server(
        "git", "mcp_server_git", "--repository", "/workspace/repo", workspace="ro", env=SAFE_GIT
    )
    m = rig.manager(table)
    assert "git.git_status" in [t.name for t in m.list_tools(0)]
    status = m.call("git.git_status", {"repo_path": "/workspace/repo"}, 0)
    assert "a.txt" in status.content, status.content
    assert "modified" in status.content
    writes = [
        ("git.git_create_branch", {"repo_path": "/workspace/repo", "branch_name": "evil"}),
        ("git.git_add", {"repo_path": "/workspace/repo", "files": ["a.txt"]}),
        ("git.git_commit", {"repo_path": "/workspace/repo", "message": "planted"}),
        ("git.git_checkout", {"repo_path": "/workspace/repo", "branch_name": "main"}),
    ]
    for name, args in writes:
        got = m.call(name, args, 0)
        assert "error" in got.content.lower() or "read-only" in got.content.lower(), (name, got)
    assert "evil" not in git(repo, "branch", "--list")
    assert git(repo, "rev-parse", "HEAD") == before
    assert git(repo, "diff", "--cached", "--name-only") == ""
    assert (repo / "a.txt").read_text() == "two\n"


def test_mcp_server_fetch_reaches_its_host_and_nothing_else(rig: Rig) -> None:
    with page_server("127.0.0.1") as (port, hits), page_server("127.0.0.2") as (port2, hits2):
        table = python_server(
            "web",
            "mcp_server_fetch",
            "--ignore-robots-txt",
            "--allow-private-ips",  # its own check off: brokerd's proxy is the one tested here
            hosts=[f"127.0.0.1:{port}"],
        )
        m = rig.manager(table)
        # raw: readabilipy would run `npm install` for the HTML to markdown step (no network)
        reached = m.call("web.fetch", {"url": f"http://127.0.0.1:{port}/granted", "raw": True}, 0)
        assert "page-3c1d" in reached.content, reached.content
        assert hits == ["/granted"]
        assert reached.untrusted
        for url in (
            f"http://127.0.0.2:{port2}/refused",  # a second loopback address: not granted
            f"http://127.0.0.1:{port2 if port2 != port else port + 1}/port",  # another port
            f"http://localhost:{port}/name",  # a name for the granted address
            f"http://[::ffff:127.0.0.1]:{port}/mapped",
            f"https://127.0.0.1:{port}/tunnel",  # CONNECT to the right place, TLS to a plain page
            f"http://127.0.0.1:{port}/redirect-to/127.0.0.2:{port2}/redirected",
        ):
            got = m.call("web.fetch", {"url": url, "raw": True}, 0)
            assert "page-3c1d" not in got.content, (url, got.content)
        assert hits2 == []
        assert hits == ["/granted", f"/redirect-to/127.0.0.2:{port2}/redirected"]
        proxy = m.servers["web"].last
        assert proxy is not None
        assert proxy.proxy is not None
        assert any("127.0.0.2" in r for r in proxy.proxy.refusals)
        assert any("localhost" in r for r in proxy.proxy.refusals)
        assert rig.log_has("mcp web: egress refused: 127.0.0.2")
