"""loopd's session workers: one process per active session, at most `[channel] max_workers`.

Each worker is `python -m boxmaker.loopd.workers.worker`, its stdin and stdout pipes to this
process (process.py: a worker's states, and `change_state`, the one way they change). The pool
keeps them by session, with those stopping or exited until reaped, and decides when each moves:
`start_turn` (IDLE -> BUSY, or a new one), `transition()` (IDLE -> STOPPING after
worker_idle_ms), `stop()` (every one).

With `[channel] spare_worker`, one worker is kept started ahead with no session: a new session's
first turn takes it (Python's start and loopd's imports, most of a worker's start, are then
already done), and the next spare is started.

The bound: at most `max_workers` worker processes live at once, the spare and those still
stopping included (each is ~20 MB of memory: docs/reliability.md). A session that needs a
worker when all are taken gets the spare if there is one; else the worker idle the longest is
retired to make room; else (all are running turns) the turn waits up to `worker_wait_ms` for one
to finish, and is then refused with `unavailable`, saying which keys to change.

`reap()` forgets the workers that have exited (Popen.poll: waitpid WNOHANG).
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time

from boxmaker.loopd.config import ChannelConfig, ConfigSource
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.proto import ErrorCode, Turn, WireError

from .gate import SlotCache
from .process import State, TurnSink, WorkerProcess
from .wire import config_frame

__all__ = ["Pool", "State", "TurnSink", "Unavailable", "WorkerProcess"]


class Unavailable(Exception):
    """No worker can take the turn (loopd is stopping, all are busy, or none could start)."""


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
        self._turn_ids = itertools.count(1)  # each turn's own identity: what a cancel names

    def live(self) -> int:
        """With the lock held: the worker processes not known to have exited."""
        everyone = [*self.workers.values(), *self.retired]
        everyone += [self.spare] if self.spare is not None else []
        return sum(w.state is not State.EXITED for w in everyone)

    def start_turn(self, request: Turn, sink: TurnSink) -> int:
        """Sends the turn to its session's worker, starting one if need be; returns the turn's
        id (a number of this loopd's, never reused), which `cancel` takes.

        The caller holds the session's lock, so the session's worker is never BUSY here.

        Raises:
            Unavailable: loopd is stopping, every worker is running a turn past worker_wait_ms,
                or no worker could be started.
        """
        session = request.session
        deadline = time.monotonic() + self.config.worker_wait_ms / 1000
        with self.lock:
            while True:
                if self.stopping:
                    raise Unavailable("loopd is stopping; send the turn again once it is back")
                worker = self.workers.get(session)
                if worker is not None and worker.state is State.IDLE:
                    turn_id = next(self._turn_ids)
                    worker.send_turn(request, sink, turn_id)
                    return turn_id
                if worker is not None:  # exited, not reaped yet
                    self.forget(worker)
                new = self._worker_for(session, deadline)
                if new is not None:
                    turn_id = next(self._turn_ids)
                    new.send_turn(request, sink, turn_id)
                    break
        self.ensure_spare()  # if the spare was taken, start the next one
        return turn_id

    def cancel(self, session: str, turn_id: int) -> bool:
        """Stops turn `turn_id` (a client's `cancel`) if the session's worker is still running
        it; True then. A turn that has ended is not stopped again, and the session's next turn
        (another client's, perhaps) is not this one: False, nothing is done (issue 38.1)."""
        with self.lock:
            worker = self.workers.get(session)
            return worker is not None and worker.cancel(turn_id)

    def _worker_for(self, session: str, deadline: float) -> WorkerProcess | None:
        """With the lock held: a BUSY worker for the session, or None after waiting for a change
        (call again). Raises Unavailable when the wait is over, or none could start."""
        # A worker of this session that is stopping (or exited, unreaped) may still hold the
        # log's flock: a new one would be refused, so wait until it has gone.
        if any(w.session == session and w.proc.poll() is None for w in self.retired):
            self.changed.wait(self.config.worker_stop_ms / 1000)
            return None
        if (spare := self._take_spare(session)) is not None:
            return spare
        if self.live() < self.config.max_workers:
            return self._spawn(session)
        idle = [w for w in self.workers.values() if w.state is State.IDLE]
        if idle:  # room is made by the worker idle the longest; then wait for it to exit
            self.retire(min(idle, key=lambda w: w.since))
            self.changed.wait(self.config.worker_stop_ms / 1000)
            return None
        if not any(w.state is State.STOPPING for w in self.retired):  # none on its way out
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable(
                    f"all {self.config.max_workers} session workers ([channel] max_workers) are "
                    f"running turns, and none finished within {self.config.worker_wait_ms} ms "
                    "([channel] worker_wait_ms); send the turn again, or raise max_workers"
                )
            self.changed.wait(left)
        else:
            self.changed.wait(self.config.worker_stop_ms / 1000)
        return None

    def _take_spare(self, session: str) -> WorkerProcess | None:
        """With the lock held: the spare, now this session's worker; None if there is none."""
        spare = self.spare
        if spare is None or spare.state is not State.IDLE:
            return None
        self.spare = None
        spare.session = session
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
        """Starts a spare worker unless one is running (or spares are off, loopd stops, or
        max_workers are live: a spare never takes a session's room)."""
        with self.lock:
            if not self.config.spare_worker or self.stopping:
                return
            if self.spare is not None and self.spare.state is not State.EXITED:
                return
            if self.spare is not None:
                self.retired.append(self.spare)
                self.spare = None
            if self.live() >= self.config.max_workers:
                return
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
            for worker in list(self.workers.values()):
                if worker.state is State.IDLE:
                    if now - worker.since >= idle_s:
                        self.retire(worker, now)
                    else:
                        due.append(worker.since + idle_s)
            for worker in self.retired:
                if worker.state is State.STOPPING and now - worker.since >= stop_s:
                    worker.proc.kill()
                elif worker.state is State.STOPPING:
                    due.append(worker.since + stop_s)
        return max(0.0, min(due) - now) if due else None

    def retire(self, worker: WorkerProcess, now: float | None = None) -> None:
        """With the lock held: IDLE -> STOPPING (EOF on its stdin makes it exit)."""
        worker.change_state(State.STOPPING, now)
        self.forget(worker)

    def forget(self, worker: WorkerProcess) -> None:
        """With the lock held: no longer any session's worker (it is stopping or has exited)."""
        if worker.session is not None and self.workers.get(worker.session) is worker:
            del self.workers[worker.session]
        if self.spare is worker:
            self.spare = None
        if worker not in self.retired:
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
            self.changed.notify_all()  # turns waiting for a worker are refused now
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
            for w in list(self.workers.values()):
                if w.state is State.IDLE:
                    self.retire(w)
            if self.spare is not None and self.spare.state is State.IDLE:
                self.retire(self.spare)
            everyone = [*self.workers.values(), *self.retired]
            everyone += [self.spare] if self.spare is not None else []
        for w in everyone:
            self._wait_exit(w)
        with self.lock:  # the readers have seen EOF: each cut turn has its error
            self.changed.wait_for(
                lambda: all(w.state is State.EXITED for w in everyone),
                self.config.worker_stop_ms / 1000,
            )
        self.reap()
        return len(cut)
