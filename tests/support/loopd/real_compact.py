"""A real llama-server with --cache-ram 0 (one 2,048-token slot), inferproxy in front of it, and a
session driven in this process through `run_turn` with a `Compactor`: what the compaction tests
and `bench/compaction.py` share.

    with CompactStack() as cs:
        chat = cs.chat("s1")
        chat.say("Hello.")                 # a turn; compaction runs when the slot fills
        chat.log.epoch, chat.events        # where the session is, what the turn reported

With `--cache-ram 0` the server keeps no prompt cache outside the slot, so `cache_n` is exactly
what the slot still held from the request before: the figures these tests assert on.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from boxmaker._toml import toml_dumps
from boxmaker.loopd.config import Config, load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.tools.registry import CORE_SCHEMAS
from boxmaker.loopd.turn.compactor import Compactor
from boxmaker.loopd.turn.kit import TurnKit
from boxmaker.loopd.turn.runner import MessageFit, run_turn
from boxmaker.proto import TurnDone, TurnEvent, WireError, format_time
from boxmaker.session.baseline import assemble_baseline
from boxmaker.session.store import SessionLog, SessionStore
from boxmaker.verify.tee import Tee
from tests.support.fake_tools import FakeTools
from tests.support.llama import LlamaServer, ensure_built
from tests.support.stack import Stack

REPO = Path(__file__).resolve().parents[3]
SYSTEM_MD = REPO / "conf" / "system.md"
CTX = 2048
MAX_TOKENS = 40  # short answers: the tiny model rambles, and the tests' time is the answers'
SUMMARY_TOKENS = 120
# Owner messages, different enough that the model's answers differ; the same every run.
TOPICS = [
    "My name is Ada and I live in Lyon.",
    "I am planning a trip to Oslo in March.",
    "Remind me that the budget is 900 euros.",
    "What should I pack for cold weather?",
    "My cat is called Pixel.",
    "I prefer trains to planes.",
    "The meeting with Bob is on Tuesday at ten.",
    "Please keep answers short.",
    "What is a good book about fjords?",
    "I am allergic to peanuts.",
]


def owner_text(i: int) -> str:
    return f"({i}) {TOPICS[i % len(TOPICS)]}"


class CompactStack:
    def __init__(self, *, compact: dict[str, Any] | None = None) -> None:
        built = ensure_built()
        self.stack = Stack("single")
        self.dir = self.stack.dir
        self.stack.server = LlamaServer(
            mode="single",
            ctx=CTX,
            slots=1,
            batch=64,
            built=built,
            workdir=self.dir / "llama",
            extra_args=("--cache-ram", "0"),
        )
        self.home = self.dir / f"home-{uuid.uuid4().hex[:6]}"
        self.compact = {"summary_tokens": SUMMARY_TOKENS, "owner_chars": 600} | (compact or {})
        self.tee: Tee | None = None  # every request body on the wire, when started

    def __enter__(self) -> CompactStack:
        self.stack.start()
        self.tee = Tee(self.dir / "tee.sock", self.stack.socket)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tee is not None:
            self.tee.stop()
        self.stack.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def chat_bodies(self) -> list[dict[str, Any]]:
        """Every chat request body the tee saw, in order."""
        assert self.tee is not None
        bodies = []
        for ex in self.tee.chat_exchanges():
            ex.wait_closed()
            _, _, body = bytes(ex.request).partition(b"\r\n\r\n")
            bodies.append(orjson.loads(body))
        return bodies

    def config(self, **inference: Any) -> Config:
        table = self.stack.config_table(
            socket_path=None if self.tee is None else self.tee.listen,
            inference={"max_tokens": MAX_TOKENS, "slots": [0]} | inference,
            expect={"n_ctx": CTX, "total_slots": 1},
        )
        table |= {
            "paths": {"home": str(self.home)},
            "baseline": {"system": str(SYSTEM_MD)},
            "compact": self.compact,
        }
        path = self.dir / f"loopd-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(toml_dumps(table))
        return load_config(path, env={})

    def chat(self, session: str) -> Chat:
        config = self.config()
        client = Client(config.inference)
        compactor = Compactor.from_config(config, client)  # None with enabled = false
        baseline = assemble_baseline(config.baseline.system, config.paths.home, CORE_SCHEMAS)
        store = SessionStore(config.paths.home)
        if store.exists(session):
            log = store.open(session)
        else:
            log = store.create(session, baseline, slot=0, time=format_time_now())
        return Chat(config, client, compactor, log)


def format_time_now() -> str:
    from datetime import UTC, datetime

    return format_time(datetime.now(UTC))


@dataclass
class Chat:
    config: Config
    client: Client
    compactor: Compactor | None
    log: SessionLog
    events: list[TurnEvent] = field(default_factory=list)

    def say(self, text: str) -> TurnDone | WireError:
        self.events = []
        return run_turn(
            self.log,
            text,
            client=self.client,
            port=FakeTools(),
            config=self.config.loop,
            thinking=False,
            on_event=self.events.append,
            compactor=self.compactor,
            fit=self.fit,
        )

    @property
    def fit(self) -> MessageFit:
        """As the worker measures a message: the server's tokenizer (issue 29.3)."""
        return TurnKit.from_config(self.config, self.client).fit
