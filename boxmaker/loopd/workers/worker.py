"""A session worker: owns one session's log and runs its turns, one at a time.

    python -m boxmaker.loopd.workers.worker [--session <id>]

loopd's main process starts one per active session (workers/pool.py); one started without
`--session` is a spare, and serves the session of the first turn it is sent. Its first frame on
stdin is the config loopd validated (wire.py's `config`): a worker never reads the file, so every
worker of one loopd runs the config loopd started with. Frames come on stdin
and go out on stdout (workers/wire.py); logging goes to stderr, and fd 1 is pointed at stderr
too, so nothing but frames ever reaches the pipe. Each `turn` is run with the session's turn
kit, built as `loopd turn` builds its own (turn/kit.py): the first opens the session's log, or
creates it (`resume: false`), taking its flock; the log stays open, and locked, until the worker
exits. The Client's gate is a PipeGate: the main process holds the slot gate every worker shares.

The worker exits when stdin reaches EOF: at once when idle (loopd let it go), or once the turn in
flight is finished and logged when loopd itself went away (its events then go nowhere). SIGTERM,
SIGINT and SIGHUP are ignored: loopd decides when a turn is cut (SIGKILL), so a signal to the
whole process group cannot cut a turn half-way. A session that cannot be opened (busy, missing,
corrupt) is answered with its error, and loopd stops the worker (wire.py's `no_session`).

A `cancel` frame (issue 30: the owner's Ctrl-C, relayed by loopd) stops the turn in flight:
`run_turn`'s `stop` reads the flag it sets (turn/runner.py says where it is seen), and the tool
calls at brokerd are withdrawn at once (a call held for the owner's approval is denied then,
not at approval_timeout_ms; BrokerPort.withdraw). The flag is
cleared when the next turn frame arrives, on the same reader thread, so a cancel that came
after its turn is never lost and never stops the turn after it.
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
from boxmaker.loopd.config import Config, ConfigError, ConfigSource
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.session_open import error_for, open_session
from boxmaker.loopd.tools.port import BrokerPort, ToolPort, utc_now
from boxmaker.loopd.turn.kit import TurnKit
from boxmaker.loopd.turn.recorded import recorded_answer
from boxmaker.proto import (
    ApprovalNeededEvent,
    BodyError,
    CacheRestored,
    CacheRestoredEvent,
    CacheSaved,
    CacheSavedEvent,
    ContentEvent,
    ErrorCode,
    ReasoningEvent,
    SessionIdError,
    Turn,
    TurnEvent,
    WireError,
    channel_frame,
    done_frames,
)
from boxmaker.proto.channel import ANSWER_PART_CHARS
from boxmaker.proto.errors import EncodeError
from boxmaker.proto.frame import Frame, error_frame
from boxmaker.session.errors import SessionError, SessionExists
from boxmaker.session.store import SessionLog

from .gate import PipeGate
from .pipes import BatchWriter, FrameReader, PipeBroken, PipeClosed, read_frames
from .wire import CANCEL, GATE_KINDS, config_fields, no_session_frame, parse_turn

PROG = "loopd worker"


def _say(line: str) -> None:
    sys.stderr.write(f"{PROG} {os.getpid()}: {line}\n")
    sys.stderr.flush()


class Worker:
    def __init__(
        self, config: Config, session: str | None, out: BatchWriter, stdin: FrameReader
    ) -> None:
        self.config = config
        self.stdin = stdin
        self.session = session
        self.out = out
        self.gate = PipeGate(out.send)
        self.gate.on_cache = self.on_cache
        self.gate.epoch = self.current_epoch
        self.client = Client(config.inference, gate=self.gate)
        self.kit = TurnKit.from_config(config, self.client)  # as `loopd turn` builds its own
        self.turns: queue.SimpleQueue[Turn | None] = queue.SimpleQueue()
        self.log: SessionLog | None = None
        self.stop_asked = threading.Event()  # the turn in flight was cancelled
        self.port: ToolPort | None = None  # the turn in flight's: a cancel withdraws its calls

    def send(self, data: bytes) -> None:
        with contextlib.suppress(PipeClosed):  # loopd is gone: the turn goes on, logged
            self.out.send(data)

    def on_frame(self, frame: Frame) -> None:
        """From the stdin reader: gate answers to the PipeGate, turns to the main thread."""
        if frame.kind in GATE_KINDS:
            self.gate.deliver(frame)
        elif frame.kind == CANCEL:
            self.stop_asked.set()
            self.withdraw()
        else:
            self.stop_asked.clear()  # a new turn: an earlier cancel was for the one before
            try:
                self.turns.put(parse_turn(frame))
            except BodyError as exc:  # loopd checks every turn: this is a bug, not a client's
                _say(f"stdin: a bad turn frame: {exc}")
                self.turns.put(None)

    def withdraw(self) -> None:
        """The turn was stopped: a call held for the owner's approval (or running) is withdrawn
        now, not at its timeout (issue 38.1). Read after `stop_asked` is set, and `_run` sets
        the port before it reads `stop_asked`: one of the two sees the other's write."""
        port = self.port
        if isinstance(port, BrokerPort):
            port.withdraw()

    def read_stdin(self) -> None:
        problem = read_frames(self.stdin, self.on_frame)
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
            self.out.close()  # every frame queued is written before the process exits

    def run(self, turn: Turn) -> None:
        """Runs one turn and sends its final frame, whatever happens in it: a failure nobody
        foresaw (a bug, a value that cannot be encoded) ends the turn with an `internal` error
        that says what it was, never the worker with a traceback and the turn with nothing."""
        try:
            self._run(turn)
        except Exception as exc:  # the last line: no turn ends without its final frame
            _say(f"a turn of {turn.session} failed: {type(exc).__name__}: {exc}")
            if self.log is not None:  # its state is unknown now: let the next worker reopen it
                with contextlib.suppress(OSError):
                    self.log.close()
                self.log = None
            self.send(no_session_frame())
            self.send(
                error_frame(
                    ErrorCode.INTERNAL,
                    f"the session worker failed: {type(exc).__name__}: {exc}; the session's log "
                    "holds the turn up to the last record written, and the next turn resumes "
                    "from it",
                )
            )
        finally:
            self.port = None  # its calls are over: nothing left to withdraw

    def _run(self, turn: Turn) -> None:
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
            recorded = (
                None
                if turn.client_ref is None or turn.compact
                else recorded_answer(self.log.records, turn.client_ref)
            )
            if recorded is not None:  # delivered before (M4 section 6): never run twice
                outcome = recorded
            elif turn.compact:  # `/compact` (issue 21): no turn, the fold alone
                outcome = self.kit.compaction(self.log, self.on_event)
            else:
                tools = self.kit.tools(self.log, turn.session, self.on_approval)
                self.port = tools["port"]
                if self.stop_asked.is_set():
                    self.withdraw()
                outcome = self.kit.turn(
                    self.log,
                    turn.content,
                    tools=tools,
                    thinking=turn.thinking,
                    on_event=self.on_event,
                    stop=self.stop_asked.is_set,
                    client_ref=turn.client_ref,
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
        if isinstance(outcome, WireError):
            self.send(channel_frame(outcome))
            return
        for data in done_frames(outcome):  # an answer too large for one frame is split
            self.send(data)

    def current_epoch(self) -> int:
        """The open session's epoch (each slot ask carries it: issue 21's cache keeper)."""
        return 0 if self.log is None else self.log.epoch

    def on_approval(self, call_id: str, tool: str, summary: str) -> None:
        self.on_event(ApprovalNeededEvent(call_id, tool, summary))

    def on_event(self, event: TurnEvent) -> None:
        try:
            data = channel_frame(event)
        except EncodeError:
            if not isinstance(event, (ContentEvent, ReasoningEvent)):
                raise  # run() ends the turn with an error saying so
            n = ANSWER_PART_CHARS  # one streamed piece too large for a frame: cut it smaller
            for i in range(0, len(event.text), n):
                self.send(channel_frame(type(event)(event.text[i : i + n])))
            return
        self.send(data)

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
    parser.add_argument("--session", help="the session; a spare takes its first turn's")
    args = parser.parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a hangup too (issue 29.7)
        signal.signal(signum, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the frames
    sys.stdout = sys.stderr
    stdin = FrameReader(0)
    try:
        frame = stdin.next()
        if frame is None:
            return 0  # loopd went away before it sent anything
        text, source, base_dir, env = config_fields(frame)
        config = ConfigSource(text, source, Path(base_dir), env).parse()
    except (PipeBroken, BodyError, ConfigError) as exc:  # loopd's bug: it validated the config
        _say(f"stdin: no config to run with: {exc}")
        return 1
    Worker(config, args.session, BatchWriter(out_fd), stdin).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
