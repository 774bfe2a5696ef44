"""Fixtures of the turn-loop tests: a fake server with the scripted model, a home on disk, and
`Turns`, which runs turns of one session there."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from boxmaker.loopd.config import Config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.tools.port import FakeTools
from boxmaker.loopd.tools.registry import CALL_TOOL
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import TurnDone, TurnEvent, WireError
from boxmaker.session.store import SessionLog
from tests.support.fakeserver import FakeServer
from tests.support.turn import (
    RecordingPort,
    Said,
    ScriptedModel,
    Ticker,
    config_for,
    serve_model,
)


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


NOON = "2026-11-30T12:00:00.000Z"  # what FakeTools' clock answers in these tests


class Turns:
    """Runs turns of one session against the env, with a recording FakeTools port."""

    def __init__(self, env: Env, log: SessionLog, **loop: Any) -> None:
        self.env = env
        self.log = log
        self.config = env.config(**loop)
        self.port = RecordingPort(FakeTools(clock=lambda: NOON))
        self.clock = Ticker()
        self.events: list[TurnEvent] = []

    def run(self, text: str, *script: Said, thinking: bool = True) -> TurnDone | WireError:
        self.env.model.load(script)
        self.events = []
        return run_turn(
            self.log,
            text,
            client=Client(self.config.inference),
            port=self.port,
            config=self.config.loop,
            thinking=thinking,
            on_event=self.events.append,
            clock=self.clock,
        )

    def new_records(self, since: int) -> list[object]:
        return list(self.log.records[since:])


def echo_via_call_tool(text: str) -> tuple[str, object]:
    return (CALL_TOOL, {"name": "echo", "arguments": {"text": text}})
