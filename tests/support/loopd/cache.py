"""A real llama-server (with --slot-save-path, -np, --cache-ram as a test wants), inferproxy in
front of it, and `loopd serve` on top, for the slot save/restore tests (issue 14).

    with CacheStack(slots=1, cache_ram=0) as cs:
        cs.start_loopd()
        cs.turn("s1", "Say hello.", resume=False)
        cs.restart_server()          # a new process: its slot caches are gone
        cs.turn("s1", "Now say goodbye.")
        cs.records("s1")             # the session's log, decoded

Each turn is one connection to loop.sock, thinking off (SmolLM2 answers in reasoning otherwise).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import orjson

from boxmaker._toml import toml_dumps
from boxmaker.loopd.llama.info import CACHE_LOSS_SLACK_TOKENS
from boxmaker.proto import (
    ChannelBody,
    Turn,
    TurnDone,
    Usage,
    User,
    channel_frame,
    verify_log,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session import epoch_files
from tests.support.llama import LlamaServer, Mode, ensure_built
from tests.support.procs import Daemon, python_module, wait_for
from tests.support.serve import connect, read_frames
from tests.support.stack import Stack

REPO = Path(__file__).resolve().parents[3]
SYSTEM_MD = REPO / "conf" / "system.md"
START_LINE = "loopd: listening on"
BOUND_S = 180.0  # loopd's start (the self-test) and a turn of the tiny model on a busy machine
MAX_TOKENS = 48  # short answers (the tiny model rambles), long enough for the tool-call check


class CacheStack:
    def __init__(
        self,
        *,
        slots: int = 1,
        ctx: int = 2048,
        cache_ram: int | None = 0,
        save_path: bool = True,
        config_slots: tuple[int, ...] | None = None,
        cache: dict[str, Any] | None = None,
        mode: Mode = "single",
        inference: dict[str, Any] | None = None,
        tables: dict[str, Any] | None = None,
    ) -> None:
        built = ensure_built()
        self.mode: Mode = mode
        self.stack = Stack(mode)
        self.dir = self.stack.dir
        self.saves = self.dir / "slots"
        self.saves.mkdir()
        self.slots, self.ctx, self.cache_ram, self.save_path = slots, ctx, cache_ram, save_path
        self._built = built
        self.stack.server = self._server(ctx)
        self.home = self.dir / f"home-{uuid.uuid4().hex[:6]}"
        self.config_slots = config_slots or tuple(range(slots))
        self.cache = {"slot_save": True, "min_tokens": 1, "idle_save_ms": 200} | (cache or {})
        self.inference = inference or {}  # more [inference] keys (slot_choice, max_tokens)
        self.tables = tables or {}  # more tables ([compact])
        self.loopd: Daemon | None = None
        self.config_path = self.dir / "loopd.toml"

    def _server(self, ctx: int) -> LlamaServer:
        extra: list[str] = []
        if self.save_path:
            extra += ["--slot-save-path", str(self.saves)]
        if self.cache_ram is not None:
            extra += ["--cache-ram", str(self.cache_ram)]
        return LlamaServer(
            mode=self.mode,
            ctx=ctx,
            slots=self.slots,
            batch=64,
            built=self._built,
            workdir=self.dir / "llama",
            extra_args=tuple(extra),
        )

    # ---- life cycle ----
    def __enter__(self) -> CacheStack:
        self.stack.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.loopd is not None:
                self.loopd.stop()
        finally:
            self.stack.stop()
            shutil.rmtree(self.dir, ignore_errors=True)

    def restart_server(self, ctx: int | None = None) -> None:
        """Kills llama-server (SIGKILL) and starts a new one, with another per-slot context size
        if given; inferproxy is restarted in front of it (the new server has a new port)."""
        self.stack.kill_proxy()
        self.stack.server.kill()
        self.stack.server = self._server(self.ctx if ctx is None else ctx)
        self.stack.server.start()
        self.stack.start_proxy()

    def write_config(self) -> Path:
        table = self.stack.config_table(
            inference={"max_tokens": MAX_TOKENS, "slots": list(self.config_slots)} | self.inference,
            expect={"n_ctx": self.ctx, "total_slots": self.slots},
        )
        table |= {
            "paths": {"home": str(self.home)},
            "baseline": {"system": str(SYSTEM_MD)},
            "channel": {"socket": str(self.dir / "loop.sock"), "spare_worker": False},
            "cache": self.cache,
        } | self.tables
        self.config_path.write_text(toml_dumps(table))
        return self.config_path

    def start_loopd(self) -> Daemon:
        self.write_config()
        self.loopd = Daemon(
            python_module("boxmaker.loopd", "serve", "--config", str(self.config_path))
        )
        self.loopd.wait_for_line(START_LINE, BOUND_S)
        return self.loopd

    def output(self) -> str:
        assert self.loopd is not None
        return "\n".join(self.loopd.lines + self.loopd.err_lines)

    def stop_loopd(self) -> str:
        """SIGTERM (the drain saves), and the lines loopd printed."""
        assert self.loopd is not None
        daemon, self.loopd = self.loopd, None
        assert daemon.stop(timeout=BOUND_S) == 0
        return "\n".join(daemon.lines + daemon.err_lines)

    # ---- turns and the log ----
    def turn(
        self, session: str, content: str, resume: bool = True, compact: bool | None = None
    ) -> list[ChannelBody]:
        sock = connect(self.dir / "loop.sock", BOUND_S)
        with sock:
            sock.sendall(channel_frame(Turn(session, content, resume, False, compact)))
            frames = read_frames(sock)
        assert isinstance(frames[-1], TurnDone), frames[-1:]
        return frames

    def records(self, session: str, epoch: int = 0) -> list[LogRecord]:
        if epoch:  # its first record links to the epoch before: checked through the chain
            chain = epoch_files.check_chain(session, self.home / "sessions" / session)
            return list(chain[epoch].checked.records)
        data = (self.home / "sessions" / session / "0.jsonl").read_bytes()
        return list(verify_log(data).records)

    def state(self) -> dict[str, Any]:
        path = self.home / "slot-cache.json"
        return orjson.loads(path.read_bytes()) if path.exists() else {}

    def wait_saved(self, session: str) -> None:
        """Until the state file says the slot holding `session` is saved (the idle save)."""

        def saved() -> bool:
            held = self.state().get("held", {})
            return any(h["session"] == session and h["saved"] for h in held.values())

        wait_for(saved, f"an idle save of {session}'s slot", BOUND_S)


def turns(records: list[LogRecord]) -> list[list[LogRecord]]:
    """The log cut at each User record: [before the first, turn 1, turn 2, ...]."""
    out: list[list[LogRecord]] = [[]]
    for record in records:
        if isinstance(record, User):
            out.append([])
        out[-1].append(record)
    return out


def previous_total(records: list[LogRecord]) -> int:
    """What the session's last completion left in the slot (the cache rule's `expected`)."""
    usage = [r for r in records if isinstance(r, Usage)][-1]
    return usage.cache_n + usage.prompt_n + usage.predicted_n


def first_usage(records: list[LogRecord]) -> Usage:
    return next(r for r in records if isinstance(r, Usage))


def hits(previous: int, usage: Usage) -> bool:
    return usage.cache_n >= previous - CACHE_LOSS_SLACK_TOKENS


def notes(session: str) -> str:
    """A first message of well over 64 tokens that no other session's shares: the two sessions
    share the system prompt (~450 tokens), so only what follows it can tell a hit from a miss."""
    return f"My notes for {session}: " + ", ".join(f"{session} item {k}" for k in range(30))
