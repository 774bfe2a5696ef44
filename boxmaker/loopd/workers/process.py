"""One session worker as loopd's main process sees it: its process, pipes, state and turn.

A worker is in one state at a time, and `change_state(new, now)` is the one way it moves, along
the transitions of TRANSITIONS (anything else is a bug, and raises):

    IDLE -> BUSY        a turn was sent to it (a spare takes the session of its first turn)
    BUSY -> IDLE        its final frame came back (the turn is over)
    BUSY -> STOPPING    its final frame came back after `no_session` (its session did not open)
    IDLE -> STOPPING    idle for worker_idle_ms, retired to make room under max_workers, or loopd
                        stops: its stdin is closed, and EOF makes it exit
    any  -> EXITED      its stdout reached EOF (it exited, or was killed)

A new worker starts BUSY (started for a turn) or IDLE (a spare). A worker's stdout is read by a
thread of its own (`_read`), which relays the channel's frames to the turn's `TurnSink` as the
bytes read (pipes.py's RelayReader), in order, and hands gate frames to the worker's GateServer.
At the end of a turn the worker is IDLE and the sink's `on_final` (the session lock's release)
has run before the final frame is delivered, so a client that sends its next turn on reading
that frame finds both free. A worker that dies mid-turn, or whose frames this thread cannot act
on, gets its turn an `internal` error; the slot and line it held are let go.
"""

from __future__ import annotations

import contextlib
import enum
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from boxmaker.loopd.config import ChannelConfig
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.proto import ErrorCode, Turn, WireError, channel_frame
from boxmaker.proto.frame import Frame

from .gate import GateServer, SlotCache
from .pipes import FrameWriter, PipeBroken, PipeClosed, Relayed, RelayReader
from .wire import GATE_KINDS, NO_SESSION, cancel_frame, turn_frame

WORKER_MODULE = "boxmaker.loopd.workers.worker"


class State(enum.Enum):
    IDLE = "idle"
    BUSY = "busy"
    STOPPING = "stopping"
    EXITED = "exited"


# Every move a worker may make, and nothing else (the table in the docstring above).
TRANSITIONS: dict[State, frozenset[State]] = {
    State.IDLE: frozenset({State.BUSY, State.STOPPING, State.EXITED}),
    State.BUSY: frozenset({State.IDLE, State.STOPPING, State.EXITED}),
    State.STOPPING: frozenset({State.EXITED}),
    State.EXITED: frozenset(),
}


class Pool(Protocol):
    """What a worker needs of its pool (pool.py): the lock its state is changed under, and more."""

    config: ChannelConfig
    config_frame: bytes  # every worker's first frame
    cache: SlotCache | None
    changed: threading.Condition  # on the pool's lock; notified at every change of state

    @property
    def lock(self) -> threading.Lock: ...

    def forget(self, worker: WorkerProcess) -> None: ...


@dataclass(frozen=True)
class TurnSink:
    """Where a turn's frames go: `deliver(frame, final)`; `on_final` runs just before the final."""

    deliver: Callable[[bytes, bool], None]
    on_final: Callable[[], None]


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


class WorkerProcess:
    """One worker: its process, pipes, state, the turn in flight, and its side of the gate."""

    def __init__(self, session: str | None, gate: SlotGate, pool: Pool) -> None:
        """A worker for `session` (BUSY), or a spare (None, IDLE) that takes the session of its
        first turn. Raises OSError when it cannot be started; nothing is left open then."""
        self.session = session
        self.pool = pool
        argv = [sys.executable, "-m", WORKER_MODULE]
        fds: list[int] = []
        try:  # any step may fail (EMFILE): every fd made so far is closed then
            down_r, down_w = os.pipe()
            fds += (down_r, down_w)
            up_r, up_w = os.pipe()
            fds += (up_r, up_w)
            self.proc = subprocess.Popen(
                argv + (["--session", session] if session is not None else []),
                stdin=down_r,
                stdout=up_w,
            )
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        os.close(down_r)  # the child's ends
        os.close(up_w)
        self.writer = FrameWriter(down_w)
        with contextlib.suppress(PipeClosed):  # it died at once: its reader says so
            self.writer.send(pool.config_frame)  # a pipe holds 64 KiB: this does not block
        self.gate = GateServer(gate, self.writer.send, pool.cache, lambda: self.session)
        self.state = State.BUSY if session is not None else State.IDLE
        self.since = time.monotonic()  # when it entered its state
        self.turn: TurnSink | None = None
        self.turn_id = 0  # the pool's id of the turn in `turn` (0: none yet)
        self.cut: WireError | None = None  # what a turn cut on purpose is told
        self.empty = False  # said `no_session`: its session did not open
        self._up = up_r
        self._reader = threading.Thread(
            target=self._read, name=f"worker-{self.proc.pid}", daemon=True
        )
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def change_state(self, new: State, now: float | None = None) -> None:
        """The one way a worker's state changes; the pool's lock is held.

        Raises:
            RuntimeError: `new` is not a move TRANSITIONS allows from the state it is in.
        """
        if new not in TRANSITIONS[self.state]:
            raise RuntimeError(f"worker {self.pid}: no transition {self.state} -> {new}")
        self.state, self.since = new, time.monotonic() if now is None else now
        if new in (State.STOPPING, State.EXITED):
            self.writer.close()  # EOF on its stdin: it exits (or has)
        self.pool.changed.notify_all()

    def send_turn(self, request: Turn, sink: TurnSink, turn_id: int) -> None:
        """IDLE -> BUSY (or a new worker, already BUSY), with the pool's lock held."""
        if self.state is not State.BUSY:
            self.change_state(State.BUSY)
        self.turn, self.turn_id = sink, turn_id
        with contextlib.suppress(PipeClosed):  # it is dying: its reader ends the turn
            self.writer.send(turn_frame(request))

    def cancel(self, turn_id: int) -> bool:
        """Passes the client's `cancel` of turn `turn_id` on (issue 30), with the pool's lock
        held; True when it was sent. A worker not running that turn has nothing to stop: its
        final frame has come (the turn is over), and the turn it runs now is another's.

        The pipe keeps the order: a cancel sent here reaches the worker before the next turn's
        frame (sent only once this turn's final frame has come), which clears it."""
        if self.state is not State.BUSY or self.turn is None or self.turn_id != turn_id:
            return False
        with contextlib.suppress(PipeClosed):
            self.writer.send(cancel_frame())
        return True

    def _read(self) -> None:
        reader = RelayReader(self._up)
        problem: str | None = None
        try:
            while (frame := reader.next()) is not None:
                self._on_frame(frame)
        except PipeBroken as exc:
            problem = str(exc)
        except Exception as exc:  # a bug, or a gate frame it cannot act on: the turn still ends
            problem = f"loopd could not act on its frames: {type(exc).__name__}: {exc}"
        if problem is not None:
            self.proc.kill()  # nothing more from it can be trusted
        os.close(self._up)
        self.gate.close()
        try:
            self.proc.wait(self.pool.config.worker_stop_ms / 1000)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # its stdout is closed or broken: it can do nothing useful
            self.proc.wait()
        with self.pool.lock:
            self.change_state(State.EXITED)
            sink, self.turn = self.turn, None
        if sink is not None:
            error = self.cut or WireError(
                ErrorCode.INTERNAL,
                f"the session worker of {self.session} (pid {self.pid}) died mid-turn "
                f"({_how_it_ended(self.proc.returncode)}"
                + (f"; {problem}" if problem else "")
                + "); the session's log holds the turn up to the last record written, and the "
                "next turn resumes from it",
            )
            sink.on_final()
            sink.deliver(channel_frame(error), True)

    def _on_frame(self, frame: Frame | Relayed) -> None:
        if isinstance(frame, Frame):
            if frame.kind in GATE_KINDS:
                self.gate.handle(frame)
            elif frame.kind == NO_SESSION:
                self.empty = True  # stopped at the final frame, below
            return  # a worker sends no `turn` or `config`: nothing to relay
        if not frame.final:
            if self.turn is not None:
                self.turn.deliver(frame.data, False)
            return
        with self.pool.lock:
            sink, self.turn = self.turn, None
            if self.state is State.BUSY:
                ended = self.empty and self.session is not None
                self.change_state(State.STOPPING if ended else State.IDLE)
                if ended:
                    self.pool.forget(self)
        if sink is not None:
            sink.on_final()
            sink.deliver(frame.data, True)
        self.gate.turn_over()  # after the client has its answer: the keeper may save now
