"""git for the MCP tests: the safe.directory environment, a git run, a small repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

GIT = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


def git(repo: object, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def make_repo(path: Path, untracked: str) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / untracked).write_text("x\n")
