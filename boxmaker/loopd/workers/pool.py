"""loopd's session workers: one process per active session, in supervisor's shape.

Each worker is `python -m boxmaker.loopd.workers.worker`, its stdin and stdout pipes to this
process. A worker is in one state at a time:

    IDLE -> BUSY        start_turn: a turn was sent to it (a new worker starts BUSY)
    spare IDLE -> BUSY  start_turn, for a session with no worker: the spare takes it
    BUSY -> IDLE        its final frame came back (the turn is over)
    BUSY -> STOPPING    its final frame came back after `no_session` (its session did not open)
    IDLE -> STOPPING    transition(): idle for worker_idle_ms, or stop(): its stdin is closed
    any  -> EXITED      its stdout reached EOF (it exited, or was killed)

With `[channel] spare_worker`, one worker is kept started ahead with no session: a new session's
first turn takes it (Python's start and loopd's imports, most of a worker's start, are then
already done), and the next spare is started.

`reap()` forgets the workers that have exited (Popen.poll: waitpid WNOHANG). A worker's stdout
is read by a thread of its own, which relays the channel's frames to the turn's `TurnSink`, in
order, and hands gate frames to the worker's GateServer. At the end of a turn the worker is IDLE
and the sink's `on_final` (the session lock's release) has run before the final frame is
delivered, so a client that sends its next turn on reading that frame finds both free. A worker
that dies mid-turn gets its turn an `internal` error; the slot and line it held are let go.
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

from boxmaker.loopd.config import ChannelConfig, ConfigSource
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.proto import ErrorCode, Turn, WireError, channel_frame
from boxmaker.proto.frame import Frame, encode_frame

from .gate import GateServer, SlotCache
from .pipes import FrameReader, FrameWriter, PipeClosed, read_frames
from .wire import (
    FINAL_KINDS,
    GATE_KINDS,
    NO_SESSION,
    PIPE_KINDS,
    RELAYED_KINDS,
    config_frame,
    turn_frame,
)

WORKER_MODULE = "boxmaker.loopd.workers.worker"


class State(enum.Enum):
    IDLE = "idle"
    BUSY = "busy"
    STOPPING = "stopping"
    EXITED = "exited"


class Unavailable(Exception):
    """No worker can take the turn (loopd is stopping, or a worker could not be started)."""


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
        """A worker for `session`, or a spare (None) that takes the session of its first turn."""
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

    def send_turn(self, request: Turn, sink: TurnSink) -> None:
        """Called with the pool's lock held, the worker BUSY."""
        self.turn = sink
        with contextlib.suppress(PipeClosed):  # it is dying: its reader ends the turn
            self.writer.send(turn_frame(request))

    def _read(self) -> None:
        try:
            problem = read_frames(FrameReader(self._up), self._on_frame)
        except Exception as exc:  # a bug, or a gate frame it cannot act on: the turn still ends
            problem = f"loopd could not act on its frames: {type(exc).__name__}: {exc}"
            self.proc.kill()
        os.close(self._up)
        self.gate.close()
        try:
            self.proc.wait(self.pool.config.worker_stop_ms / 1000)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # its stdout is closed or broken: it can do nothing useful
            self.proc.wait()
        with self.pool.lock:
            self.state, self.since = State.EXITED, time.monotonic()
            sink, self.turn = self.turn, None
            self.writer.close()
            self.pool.changed.notify_all()
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

    def _on_frame(self, frame: Frame) -> None:
        if frame.kind in GATE_KINDS:
            self.gate.handle(frame)
            return
        if frame.kind == NO_SESSION:
            self.empty = True  # stopped at the final frame, below
            return
        if frame.kind not in RELAYED_KINDS:
            return  # a worker sends no `turn`: nothing to relay
        data = encode_frame(frame.kind, frame.body, frame.final, PIPE_KINDS)
        if frame.kind not in FINAL_KINDS:
            if self.turn is not None:
                self.turn.deliver(data, False)
            return
        with self.pool.lock:
            sink, self.turn = self.turn, None
            if self.state is State.BUSY:
                self.state, self.since = State.IDLE, time.monotonic()
                if self.empty and self.session is not None:
                    self.pool.retire(self.session, self)
            self.pool.changed.notify_all()
        if sink is not None:
            sink.on_final()
            sink.deliver(data, True)


class Pool:
    """The workers of one loopd, by session."""

    def __init__(
        self,
        source: ConfigSource,
        config: ChannelConfig,
        gate: SlotGate,
        cache: SlotCache | None = None,
    ) -> None:
        """Raises EncodeError when `source` does not fit one frame (a config near 1 MiB)."""
        # Every worker's first frame: the config as loopd read it, never the file again.
        base_dir = str(source.base_dir)
        self.config_frame = config_frame(source.text, source.source, base_dir, dict(source.env))
        self.config = config
        self.gate = gate
        self.cache = cache  # the slot save/restore keeper, with [cache] slot_save on
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.workers: dict[str, WorkerProcess] = {}
        self.retired: list[WorkerProcess] = []  # stopping or exited, not reaped yet
        self.spare: WorkerProcess | None = None  # started ahead, for the next new session
        self.stopping = False

    def start_turn(self, request: Turn, sink: TurnSink) -> int:
        """Sends the turn to its session's worker, starting one if need be; returns its pid.

        The caller holds the session's lock, so the session's worker is never BUSY here.

        Raises:
            Unavailable: loopd is stopping, or no worker could be started.
        """
        session = request.session
        while True:
            with self.lock:
                if self.stopping:
                    raise Unavailable("loopd is stopping; send the turn again once it is back")
                worker = self.workers.get(session)
                if worker is not None and worker.state is State.IDLE:
                    worker.state, worker.since = State.BUSY, time.monotonic()
                    worker.send_turn(request, sink)
                    return worker.pid
                if worker is not None:  # exited, not reaped yet
                    del self.workers[session]
                    self.retired.append(worker)
                # A worker of this session that is stopping (or exited, unreaped) may still hold
                # the log's flock: a new one would be refused, so wait until it has gone.
                leaving = next(
                    (w for w in self.retired if w.session == session and w.proc.poll() is None),
                    None,
                )
                if leaving is None:
                    new = self._take_spare(session) or self._spawn(session)
                    new.send_turn(request, sink)
                    break
            self._wait_exit(leaving)
        self.ensure_spare()  # if the spare was taken, start the next one
        return new.pid

    def _take_spare(self, session: str) -> WorkerProcess | None:
        """With the lock held: the spare, now this session's BUSY worker; None if there is none."""
        spare = self.spare
        if spare is None or spare.state is not State.IDLE:
            return None
        self.spare = None
        spare.session, spare.state, spare.since = session, State.BUSY, time.monotonic()
        self.workers[session] = spare
        return spare

    def _spawn(self, session: str) -> WorkerProcess:
        """With the lock held: a new BUSY worker for the session."""
        try:
            worker = WorkerProcess(session, self.gate, self)
        except OSError as exc:
            raise Unavailable(f"cannot start a session worker: {exc}") from exc
        self.workers[session] = worker
        return worker

    def ensure_spare(self) -> None:
        """Starts a spare worker unless one is running (or spares are off, or loopd stops)."""
        with self.lock:
            if not self.config.spare_worker or self.stopping:
                return
            if self.spare is not None and self.spare.state is not State.EXITED:
                return
            if self.spare is not None:
                self.retired.append(self.spare)
            try:
                self.spare = WorkerProcess(None, self.gate, self)
            except OSError:
                self.spare = None  # the next turn starts its own worker, and says so if it can't

    def _wait_exit(self, worker: WorkerProcess) -> None:
        try:
            worker.proc.wait(self.config.worker_stop_ms / 1000)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()

    def transition(self, now: float | None = None) -> float | None:
        """Stops the workers idle for worker_idle_ms and kills those that overstay stopping.

        Returns the seconds until the next transition is due, or None when none is.
        """
        now = time.monotonic() if now is None else now
        idle_s = self.config.worker_idle_ms / 1000
        stop_s = self.config.worker_stop_ms / 1000
        self.ensure_spare()
        due: list[float] = []
        with self.lock:
            for session, worker in list(self.workers.items()):
                if worker.state is State.IDLE:
                    if now - worker.since >= idle_s:
                        self.retire(session, worker, now)
                    else:
                        due.append(worker.since + idle_s)
            for worker in self.retired:
                if worker.state is State.STOPPING and now - worker.since >= stop_s:
                    worker.proc.kill()
                elif worker.state is State.STOPPING:
                    due.append(worker.since + stop_s)
        return max(0.0, min(due) - now) if due else None

    def retire(self, session: str, worker: WorkerProcess, now: float | None = None) -> None:
        """With the lock held: IDLE -> STOPPING; EOF on its stdin makes it exit."""
        if self.workers.get(session) is worker:
            del self.workers[session]
        worker.state, worker.since = State.STOPPING, time.monotonic() if now is None else now
        worker.writer.close()
        self.retired.append(worker)

    def reap(self) -> list[WorkerProcess]:
        """Forgets the workers that have exited; returns them."""
        with self.lock:
            gone = [w for w in self.retired if w.proc.poll() is not None]
            gone += [w for w in self.workers.values() if w.state is State.EXITED]
            for w in gone:
                if w in self.retired:
                    self.retired.remove(w)
                elif w.session is not None and self.workers.get(w.session) is w:
                    del self.workers[w.session]
        return gone

    def stop(self, drain_s: float) -> int:
        """Refuses new turns, lets those in flight finish within `drain_s`, cuts the rest, then
        stops every worker. Returns how many turns were cut."""
        deadline = time.monotonic() + drain_s
        with self.lock:
            self.stopping = True
            while any(w.state is State.BUSY for w in self.workers.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            cut = [w for w in self.workers.values() if w.state is State.BUSY]
            for w in cut:
                w.cut = WireError(
                    ErrorCode.UNAVAILABLE,
                    f"loopd stopped and the turn did not finish within drain_ms "
                    f"({self.config.drain_ms} ms); it was cut. The session's log holds the turn "
                    "up to the last record written; send it again once loopd is back",
                )
                w.proc.kill()
            for session, w in list(self.workers.items()):
                if w.state is State.IDLE:
                    self.retire(session, w)
            if self.spare is not None:
                self.spare.state = State.STOPPING
                self.spare.writer.close()
                self.retired.append(self.spare)
                self.spare = None
            everyone = [*self.workers.values(), *self.retired]
        for w in everyone:
            self._wait_exit(w)
        with self.lock:  # the readers have seen EOF: each cut turn has its error
            self.changed.wait_for(
                lambda: all(w.state is State.EXITED for w in everyone),
                self.config.worker_stop_ms / 1000,
            )
        self.reap()
        return len(cut)
