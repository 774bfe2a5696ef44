"""`loopd turn` run in-process: its config written, its output lines read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.loopd.cli import main
from tests.support.turn import SYSTEM, Env, config_text

RUN_BOUND_S = 60.0


def write_config(env: Env, **loop: Any) -> Path:
    assert isinstance(env.fake.address, Path)
    system = env.home.parent / "system.md"
    system.write_text(SYSTEM + "\n")
    path = env.home.parent / "loopd.toml"
    path.write_text(config_text(env.fake.address, env.home, system, **loop))
    return path


def lines(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines()]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    status = main(["turn", *argv])
    out, err = capsys.readouterr()
    return status, lines(out), err
