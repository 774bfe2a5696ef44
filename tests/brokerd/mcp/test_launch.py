"""The server's command line: sandbox.py's own, changed only where the workspace is bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker.brokerd.mcp.config import McpServerConfig, parse_mcp
from boxmaker.brokerd.mcp.launch import EGRESS_SOCKET, LaunchError, sandbox_for, server_argv
from boxmaker.brokerd.sandbox import Sandbox


def server(**keys: object) -> McpServerConfig:
    return parse_mcp({"s": {"command": "/usr/bin/true", **keys}}, "/")["s"]


@pytest.mark.parametrize(
    ("workspace", "bind"),
    [("none", None), ("ro", "--ro-bind"), ("rw", "--bind")],
)
def test_the_workspace_is_bound_as_configured(tmp_path: Path, workspace: str, bind: str) -> None:
    config = server(workspace=workspace, args=["-x"], env={"A": "b"})
    sandbox = sandbox_for(config, str(tmp_path))
    argv = server_argv(config, sandbox, None)
    assert argv == [*argv[: argv.index("/usr/bin/true")], "/usr/bin/true", "-x"]
    pairs = list(zip(argv, argv[1:], argv[2:], strict=False))
    bound = [a for a, src, dst in pairs if src == str(tmp_path) and dst == "/workspace"]
    assert bound == ([] if bind is None else [bind])
    assert ("--setenv", "A", "b") in pairs
    assert "/bin/sh" not in argv
    # everything else is sandbox.argv's own, in its order
    own = sandbox.argv("x")
    for flag in ("--unshare-all", "--die-with-parent", "--clearenv", "--remount-ro"):
        assert argv.index(flag) < argv.index("/usr/bin/true")
        assert flag in own


def test_hosts_run_the_bridge_with_the_egress_socket(tmp_path: Path) -> None:
    config = server(hosts=["example.com"])
    argv = server_argv(config, sandbox_for(config, str(tmp_path)), str(tmp_path / "e.sock"))
    assert ("--bind", str(tmp_path / "e.sock"), EGRESS_SOCKET) in zip(
        argv, argv[1:], argv[2:], strict=False
    )
    assert ("--setenv", "HTTPS_PROXY", "http://127.0.0.1:3128") in zip(
        argv, argv[1:], argv[2:], strict=False
    )
    assert argv[-4:] == [EGRESS_SOCKET, "3128", "--", "/usr/bin/true"]


class InnerLimit(Sandbox):
    """sandbox.argv as the sandbox branch writes it: a second prlimit inside bwrap."""

    def argv(self, command: str) -> list[str]:
        *head, sep, sh, c, cmd = super().argv(command)
        assert self.prlimit is not None
        return [*head, sep, self.prlimit, "--nproc=64", "--", sh, c, cmd]


def test_an_inner_command_before_the_shell_is_kept(tmp_path: Path) -> None:
    config = server()
    argv = server_argv(config, InnerLimit(str(tmp_path)), None)
    assert argv[-4:] == [InnerLimit(str(tmp_path)).prlimit, "--nproc=64", "--", "/usr/bin/true"]


def test_a_missing_ro_path_is_named(tmp_path: Path) -> None:
    config = server(ro_paths=[str(tmp_path / "gone")])
    with pytest.raises(LaunchError, match=f"ro_paths: {tmp_path}/gone does not exist"):
        server_argv(config, sandbox_for(config, str(tmp_path)), None)
