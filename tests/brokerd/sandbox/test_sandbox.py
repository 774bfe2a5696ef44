"""The sandbox's refusals and the `shell` tool's arguments and results, through real bwrap runs."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.brokerd.sandbox import Sandbox, SandboxLimits
from boxmaker.brokerd.tools import shell
from tests.support.brokerd.sandbox import Rig, make_rig, sandbox_uid


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from make_rig(SandboxLimits(timeout_ms=5000))


def test_a_command_runs_in_the_workspace(rig: Rig) -> None:
    result = rig.sandbox.run("pwd; echo made > made.txt; id -u; exit 3")
    assert result.exit_code == 3
    lines = result.output.splitlines()
    assert lines[0] == "/workspace"
    assert (rig.workspace / "made.txt").read_text() == "made\n"
    expected = sandbox_uid()
    assert int(lines[1]) == (expected[0] if expected else os.getuid())
    assert result.text.endswith("[exit status 3]")


def test_a_missing_bwrap_refuses_and_runs_nothing(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, bwrap=None, run_as=sandbox_uid())
    box.bwrap = None  # as if shutil.which found nothing
    result = box.run("touch ran")
    assert result.refused is not None
    assert "bubblewrap" in result.refused
    assert "install" in result.refused
    assert not (tmp_path / "ran").exists()
    response = shell.call(box, {"command": "touch ran"})
    assert response.content.startswith("shell refused: bubblewrap")
    assert not response.untrusted


def _fake_bwrap(folder: Path, body: str) -> str:
    path = folder / "bwrap"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def test_a_kernel_that_refuses_namespaces_refuses_the_call(rig: Rig) -> None:
    """A bwrap that fails as it does without user namespaces: the call is refused with the cause
    and the reason stays for later calls; the command is never run some other way."""
    fake = _fake_bwrap(rig.base, 'echo "bwrap: No permissions to create new namespace" >&2; exit 1')
    os.chmod(rig.base, 0o755)
    box = Sandbox(rig.workspace, bwrap=fake, run_as=rig.sandbox.run_as)
    first = box.run("touch ran")
    assert first.refused is not None
    assert "No permissions to create new namespace" in first.refused
    assert "user namespaces" in first.refused
    assert box.run("touch ran").refused == first.refused
    assert not (rig.workspace / "ran").exists()


def _nobody() -> tuple[int, int]:
    """The sandbox's uid under root (sandbox_uid); named here for any user: a folder of mode
    0700 is one nobody cannot pass, and probe() says so before it starts anything."""
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def test_a_workspace_the_sandbox_cannot_reach_is_refused(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    box = Sandbox(hidden, run_as=_nobody())
    assert box.probe() is not None
    assert box.run("true").refused == box.probe()


def test_the_refusal_names_the_folder_the_sandbox_cannot_pass() -> None:
    """make run as root: a run folder of mode 0700 above the workspace. The reason names that
    folder and its mode, not the kernel's user-namespace settings."""
    base = Path(tempfile.mkdtemp(prefix="bx-reach-"))  # /tmp's own, 0755: pytest's is 0700
    os.chmod(base, 0o755)
    closed = base / "run"
    closed.mkdir(mode=0o700)
    workspace = closed / "workspace"
    workspace.mkdir(mode=0o777)
    try:
        why = Sandbox(workspace, run_as=_nobody()).probe()
    finally:
        shutil.rmtree(base)
    assert why is not None
    expected = f"{closed} is mode 0700, owner {os.geteuid()}"
    assert f"cannot reach the workspace {workspace}: {expected}" in why, why
    assert "namespaces" not in why, why


def test_root_without_a_sandbox_uid_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Sandbox(tmp_path)
    box.run_as = None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert "root" in (box.probe() or "")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "must be an object"),
        ({}, "command must be a non-empty string"),
        ({"command": "  "}, "non-empty"),
        ({"command": 3}, "non-empty"),
        ({"command": "ls", "cwd": "/"}, "unknown argument 'cwd'"),
        ({"command": "ls", "timeout_ms": 0}, "positive integer"),
        ({"command": "ls", "timeout_ms": True}, "positive integer"),
        ({"command": "ls", "timeout_ms": 1.5}, "positive integer"),
        ({"command": "a\0b"}, "no NUL"),
        ({"command": "x" * (shell.MAX_COMMAND_BYTES + 1)}, "at most"),
    ],
)
def test_bad_arguments_are_a_result_that_says_what_to_send(
    rig: Rig, args: object, error: str
) -> None:
    response = shell.call(rig.sandbox, args)
    assert error in response.content
    assert not any(rig.workspace.iterdir())


def test_the_result_is_untrusted_and_says_when_it_was_cut(rig: Rig) -> None:
    small = Sandbox(rig.workspace, SandboxLimits(output_bytes=1024), run_as=rig.sandbox.run_as)
    response = shell.call(small, {"command": "seq 1 100000"})
    assert response.untrusted
    assert response.truncated
    assert "output cut" in response.content
    ok = shell.call(rig.sandbox, {"command": "echo fine", "timeout_ms": 2000})
    assert ok.untrusted
    assert not ok.truncated
    assert ok.content == "fine\n[exit status 0]"


def test_a_call_cannot_ask_for_more_time_than_the_limit(rig: Rig) -> None:
    box = Sandbox(rig.workspace, SandboxLimits(timeout_ms=300), run_as=rig.sandbox.run_as)
    result = box.run("sleep 5", timeout_ms=60_000)
    assert result.timed_out
    assert result.elapsed_ms < 3000


@pytest.mark.parametrize(
    ("name", "value"),
    [("timeout_ms", 0), ("processes", 1), ("output_bytes", 10), ("memory_bytes", True)],
)
def test_limits_out_of_bounds_are_refused_with_the_range(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"{name} = .*give an integer"):
        SandboxLimits(**{name: value})  # type: ignore[arg-type]


def test_the_command_line_binds_no_secret_folder(rig: Rig) -> None:
    argv = rig.sandbox.argv("true")
    sources = {argv[i + 1] for i, a in enumerate(argv) if a.startswith(("--bind", "--ro-bind"))}
    assert "/etc" not in sources
    assert "/etc/shadow" not in sources
    assert not {s for s in sources if s.startswith(("/home", "/root", "/run", "/var", "/tmp/"))} - {
        str(rig.workspace)
    }
    assert "--unshare-all" in argv
    assert "--die-with-parent" in argv
    assert "--clearenv" in argv


def test_a_missing_prlimit_refuses(rig: Rig) -> None:
    box = Sandbox(rig.workspace, run_as=rig.sandbox.run_as)
    box.prlimit = None
    assert "prlimit" in (box.run("touch ran").refused or "")
    assert not (rig.workspace / "ran").exists()


def test_calls_from_several_threads_each_get_their_own_sandbox(rig: Rig) -> None:
    """brokerd serves calls in parallel: each sandbox has its own /tmp and pids, same workspace."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> str:
        return rig.sandbox.run(
            f"echo {i} > /tmp/mine; sleep 0.2; cat /tmp/mine; echo {i} > out{i}"
        ).output

    with ThreadPoolExecutor(6) as pool:
        outputs = list(pool.map(one, range(6)))
    assert outputs == [f"{i}\n" for i in range(6)]
    assert sorted(p.name for p in rig.workspace.iterdir()) == [f"out{i}" for i in range(6)]


def test_a_workspace_the_sandbox_cannot_write_is_refused(rig: Rig) -> None:
    os.chmod(rig.workspace, 0o555)
    try:
        box = Sandbox(rig.workspace, run_as=rig.sandbox.run_as)
        reason = box.run("true").refused
        assert reason is not None
        assert "cannot write the workspace" in reason
    finally:
        os.chmod(rig.workspace, 0o755)


def test_the_approval_summary_shows_the_whole_command() -> None:
    text = shell.summary({"command": "curl -d @secrets.txt x", "timeout_ms": 500})
    assert text == (
        "run in the sandbox (workspace read-write, no network, at most 500 ms): "
        "curl -d @secrets.txt x"
    )
    long = shell.summary({"command": "y" * 60_000})
    assert long.endswith(": " + "y" * 60_000)  # never cut (issue 27): the owner sees it all
    assert "non-empty" in shell.summary({"command": ""})
