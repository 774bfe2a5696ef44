"""The Mattermost wire fixtures in ../shared/mattermost/ (SOURCES.md says where each is from).

CI puts shared/ beside the clone; a worktree sits deeper, so the nearest `shared/mattermost`
beside the repository or one of its ancestors is the one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def _find() -> Path:
    for base in [REPO, *REPO.parents]:
        candidate = base.parent / "shared" / "mattermost"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"no shared/mattermost beside {REPO} or its parents: the fake's fixtures are missing"
    )


FIXTURES = _find()


def fixture_files() -> list[str]:
    """Every fixture, as its path under FIXTURES (SOURCES.md is the index, not a fixture)."""
    return sorted(
        p.relative_to(FIXTURES).as_posix()
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.name != "SOURCES.md"
    )


def text(name: str) -> str:
    return (FIXTURES / name).read_text("utf-8")


def load(name: str) -> Any:
    return json.loads(text(name))


def http_message(name: str) -> tuple[int, dict[str, str], str]:
    """A `.http` fixture: its status, its headers (names lowered), its body."""
    head, _, body = text(name).partition("\n\n")
    status_line, *lines = head.splitlines()
    headers = {}
    for line in lines:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body
