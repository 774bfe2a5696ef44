"""Fixtures of the turn-loop tests: a fake server with the scripted model, a home on disk."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from boxmaker.loopd.config import Config
from tests.loopd.turn.support import ScriptedModel, config_for, serve_model
from tests.support.fakeserver import FakeServer


@dataclass
class Env:
    fake: FakeServer
    model: ScriptedModel
    home: Path

    def config(self, **loop: Any) -> Config:
        assert isinstance(self.fake.address, Path)
        return config_for(self.fake.address, self.home, **loop)


@pytest.fixture
def env() -> Iterator[Env]:
    # Under /tmp and short: a Unix socket path has at most 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="bt-", dir="/tmp"))
    try:
        with FakeServer(folder / "infer.sock") as fake:
            yield Env(fake, serve_model(fake), folder / "home")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
