"""A chat over the fake tools for the compaction tests: the Chat, and the turns it folds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from boxmaker.loopd.config import CompactConfig
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.turn.compactor import Compactor
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import (
    CompactedEvent,
    TurnDone,
    TurnEvent,
    WireError,
)
from boxmaker.session.store import SessionLog
from tests.support.fake_tools import FakeTools, fake_registry
from tests.support.turn import NOON, Env, Said, Ticker

LONG = "Please remember this detail: " + "the quick brown fox jumps over the lazy dog. " * 12


SUMMARY = "## Goal\nchat\n## What was done\ntalked\n## Decisions and facts the owner gave\nnone\n"


@dataclass
class Chat:
    env: Env
    log: SessionLog
    compactor: Compactor
    events: list[TurnEvent] = field(default_factory=list)

    def run(self, text: str, *script: Said, **loop: Any) -> TurnDone | WireError:
        self.env.model.load(script)
        self.events = []
        config = self.env.config(**loop)
        return run_turn(
            self.log,
            text,
            client=Client(config.inference),
            port=FakeTools(clock=lambda: NOON),
            registry=fake_registry(),
            config=config.loop,
            on_event=self.events.append,
            clock=Ticker(),
            compactor=self.compactor,
        )

    def compacted(self) -> list[CompactedEvent]:
        return [e for e in self.events if isinstance(e, CompactedEvent)]


def chat(env: Env, log: SessionLog, n_ctx: int = 1 << 30, **compact: Any) -> Chat:
    system = env.home.parent / "system.md"
    system.write_text("You are a test.\n")
    config = CompactConfig(**{"keep_turns": 1, "min_cut": 0.0, **compact})
    client = Client(env.config().inference)
    return Chat(env, log, Compactor(client, config, n_ctx, system, env.home, 4096))
