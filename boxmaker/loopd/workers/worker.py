"""A session worker: owns one session's log and runs its turns, one at a time.

    python -m boxmaker.loopd.workers.worker --config <path> [--session <id>]

loopd's main process starts one per active session (workers/pool.py); one started without
`--session` is a spare, and serves the session of the first turn it is sent. Frames come on stdin
and go out on stdout (workers/wire.py); logging goes to stderr, and fd 1 is pointed at stderr
too, so nothing but frames ever reaches the pipe. Each `turn` is run as `loopd turn` runs one
(turn/command.py): the first opens the session's log, or creates it (`resume: false`), taking its
flock; the log stays open, and locked, until the worker exits. The Client's gate is a PipeGate:
the main process holds the slot gate every worker shares.

The worker exits when stdin reaches EOF: at once when idle (loopd let it go), or once the turn in
flight is finished and logged when loopd itself went away (its events then go nowhere). SIGTERM
and SIGINT are ignored: loopd decides when a turn is cut (SIGKILL), so a signal to the whole
process group cannot cut a turn half-way. A session that cannot be opened (busy, missing,
corrupt) is answered with its error, and loopd stops the worker (wire.py's `no_session`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from boxmaker.loopd.cache.policy import Note
from boxmaker.loopd.config import Config, ConfigError, load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.session_open import error_for, open_session
from boxmaker.loopd.tools.port import FakeTools, utc_now
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.proto import (
    BodyError,
    CacheRestored,
    CacheRestoredEvent,
    CacheSaved,
    CacheSavedEvent,
    ErrorCode,
    SessionIdError,
    Turn,
    TurnEvent,
    WireError,
    channel_frame,
)
from boxmaker.proto.frame import Frame
from boxmaker.session.errors import SessionError, SessionExists
from boxmaker.session.store import SessionLog

from .gate import PipeGate
from .pipes import FrameWriter, PipeClosed, read_frames
from .wire import GATE_KINDS, no_session_frame, parse_turn

PROG = "loopd worker"


def _say(line: str) -> None:
    sys.stderr.write(f"{PROG} {os.getpid()}: {line}\n")
    sys.stderr.flush()


class Worker:
    def __init__(self, config: Config, session: str | None, out: FrameWriter) -> None:
        self.config = config
        self.session = session
        self.out = out
        self.gate = PipeGate(out.send)
        self.gate.on_cache = self.on_cache
        self.client = Client(config.inference, gate=self.gate)
        self.turns: queue.SimpleQueue[Turn | None] = queue.SimpleQueue()
        self.log: SessionLog | None = None

    def send(self, data: bytes) -> None:
        with contextlib.suppress(PipeClosed):  # loopd is gone: the turn goes on, logged
            self.out.send(data)

    def on_frame(self, frame: Frame) -> None:
        """From the stdin reader: gate answers to the PipeGate, turns to the main thread."""
        if frame.kind in GATE_KINDS:
            self.gate.deliver(frame)
        else:
            try:
                self.turns.put(parse_turn(frame))
            except BodyError as exc:  # loopd checks every turn: this is a bug, not a client's
                _say(f"stdin: a bad turn frame: {exc}")
                self.turns.put(None)

    def read_stdin(self) -> None:
        problem = read_frames(0, self.on_frame)
        if problem is not None:
            _say(f"stdin: {problem}")
        self.gate.parent_gone()
        self.turns.put(None)

    def serve(self) -> None:
        threading.Thread(target=self.read_stdin, name="stdin", daemon=True).start()
        try:
            while (request := self.turns.get()) is not None:
                self.run(request)
        finally:
            if self.log is not None:
                self.log.close()

    def run(self, turn: Turn) -> None:
        """Runs one turn and sends its final frame."""
        if self.session is None:
            self.session = turn.session  # a spare: this is its session from now on
        if turn.session != self.session:
            self.send(channel_frame(WireError(ErrorCode.INTERNAL, "turn for another session")))
            return
        try:
            if self.log is None:
                self.log = open_session(self.config, self.client, turn.session, not turn.resume)
            elif not turn.resume:
                raise SessionExists(f"session {turn.session} already exists; resume it")
            outcome = run_turn(
                self.log,
                turn.content,
                client=self.client,
                port=FakeTools(),
                config=self.config.loop,
                thinking=self.config.loop.thinking if turn.thinking is None else turn.thinking,
                on_event=self.on_event,
            )
        except (SessionError, SessionIdError, InferError) as exc:
            if self.log is not None and self.log.closed:
                self.log = None  # an append failed and closed it
            if self.log is None:
                # Nothing open: loopd stops this worker on reading this, before the final frame,
                # so the next turn of the session gets a fresh one (no process kept for nothing).
                self.send(no_session_frame())
            self.send(channel_frame(error_for(exc)))
            return
        self.send(channel_frame(outcome))

    def on_event(self, event: TurnEvent) -> None:
        self.send(channel_frame(event))

    def on_cache(self, notes: list[object]) -> None:
        """The saves and restores loopd did for this session (a grant's `cache`): each one a
        record in the log (this worker is its one writer) and an event on the channel. Called
        in the request's thread, before the request goes out."""
        for obj in notes:
            try:
                note = Note.from_json(obj)
            except ValueError as exc:
                _say(f"a bad cache note from loopd: {exc}")
                continue
            io = note.io
            if note.kind == "saved":
                record: CacheSaved | CacheRestored = CacheSaved(
                    utc_now(), note.slot, io.tokens, io.size, io.elapsed_us
                )
                event: TurnEvent = CacheSavedEvent(io.tokens, io.elapsed_us)
            else:
                record = CacheRestored(utc_now(), note.slot, io.tokens, io.size, io.elapsed_us)
                event = CacheRestoredEvent(io.tokens, io.elapsed_us)
            if self.log is not None and not self.log.closed:
                self.log.append(record)
            self.on_event(event)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="One session's worker (loopd's).")
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--session", help="the session; a spare takes its first turn's")
    args = parser.parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the frames
    sys.stdout = sys.stderr
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        _say(str(exc))
        return 1
    Worker(config, args.session, FrameWriter(out_fd)).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
