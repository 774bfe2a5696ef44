"""The slot gate across a pipe: `PipeGate` in the worker, `GateServer` in loopd's main process.

Every worker's requests go through the one SlotGate of the main process, so two sessions on one
slot still take turns, first come first served (M2a brief, section 4, step 1). The worker's
Client gets a PipeGate: `hold` sends `gate_ask`, passes each `gate_queued` on as
`QueuedEvent(ahead)` (so `queued` reaches the channel's client), and enters on `gate_grant`;
every way out of the `with` sends `gate_release`, which gives the slot up or leaves the line,
and waits for `gate_left`, so a request that follows at once finds the line as it should.
`gate_busy` raises Busy, as SlotGate does when the line is full.

The main process runs one GateServer per worker: its thread holds each `gate_ask` in SlotGate
until the worker releases it or goes away (`close`).

With `[cache] slot_save` on, the GateServer calls its `SlotCache` (loopd/cache/keeper.py) once
the slot is held and before it grants it (the saves and restores due), once the worker has
released it, before letting it go, and once the worker's turn is over (`turn_over`, from
process.py at the final frame: the after-turn save is once a turn, not once a completion). A
grant then carries `cache`, the notes the session's log is owed; the PipeGate hands them to
`on_cache` before the request goes out.
Each `gate_ask` names the session's current epoch (the worker's `epoch` callable, read from its
open log); the GateServer keeps the held ask's in `epoch`, for the keeper (issue 21: a save
file is per epoch, since each epoch's prefix differs from the earlier section of its system
message on).

When the main process is gone (EOF on the worker's stdin, `parent_gone`), there is nobody to
share the slot with: a PipeGate then lets its worker through at once, so the turn in flight can
finish and be logged.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from boxmaker.loopd.llama.errors import Busy
from boxmaker.loopd.llama.gate import Left, SlotGate
from boxmaker.loopd.llama.types import OnEvent
from boxmaker.proto import BodyError, QueuedEvent
from boxmaker.proto.frame import Frame

from .pipes import PipeClosed
from .wire import gate_fields, gate_frame

Send = Callable[[bytes], None]
OnCache = Callable[[list[Any]], None]


class SlotCache(Protocol):
    """The main process's save/restore keeper, as the gate needs it (cache.keeper.CacheKeeper)."""

    def before_grant(self, slot: int, session: str | None, epoch: int) -> list[dict[str, Any]]: ...

    def after_release(self, slot: int, session: str | None, epoch: int) -> None: ...

    def turn_over(self, session: str | None) -> None: ...


class PipeGate:
    """The worker's Gate: asks the main process through `send`; answers come in by `deliver`.

    One `hold` at a time (a worker runs one request at a time).
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._cond = threading.Condition()
        self._answers: deque[Frame] = deque()
        self._ask = 0
        self._gone = False
        self.on_cache: OnCache | None = None  # the grant's cache notes, for the session's log
        # The session's current epoch, sent with each ask (issue 21: a compaction moves it, and
        # the cache keeper's save files are per epoch); None sends none (the main process: 0).
        self.epoch: Callable[[], int] | None = None

    def deliver(self, frame: Frame) -> None:
        """A gate frame from the main process (called by the worker's stdin reader)."""
        with self._cond:
            self._answers.append(frame)
            self._cond.notify_all()

    def parent_gone(self) -> None:
        """The main process is gone: every hold, waiting or to come, goes through."""
        with self._cond:
            self._gone = True
            self._cond.notify_all()

    def _next_answer(self, ask: int) -> Frame | None:
        """The next answer to `ask` (older asks' answers are dropped), or None once gone."""
        with self._cond:
            while True:
                while self._answers:
                    frame = self._answers.popleft()
                    if gate_fields(frame)[0] == ask:
                        return frame
                if self._gone:
                    return None
                self._cond.wait()

    def _try_send(self, data: bytes) -> bool:
        try:
            self._send(data)
            return True
        except PipeClosed:
            self.parent_gone()
            return False

    def pick(self, slots: tuple[int, ...]) -> int:
        """The slot the main process's SlotGate gives a new session (the first once it is
        gone). Asked before the session's first request, with no slot held."""
        with self._cond:
            self._ask += 1
            ask = self._ask
            gone = self._gone
        if gone or not self._try_send(gate_frame("gate_pick", ask, slots=list(slots))):
            return slots[0]
        while (answer := self._next_answer(ask)) is not None:
            if answer.kind == "gate_picked":
                slot = gate_fields(answer, "slot")[1]
                return slot if slot in slots else slots[0]
        return slots[0]

    @contextmanager
    def hold(self, slot: int, on_event: OnEvent) -> Iterator[None]:
        """See `llama.gate.Gate.hold`."""
        with self._cond:
            self._ask += 1
            ask = self._ask
            gone = self._gone
        fields = {"slot": slot} if self.epoch is None else {"slot": slot, "epoch": self.epoch()}
        if gone or not self._try_send(gate_frame("gate_ask", ask, **fields)):
            yield
            return
        asked = True
        try:
            while (answer := self._next_answer(ask)) is not None:
                if answer.kind == "gate_grant":
                    notes = answer.body.get("cache")
                    if isinstance(notes, list) and notes and self.on_cache is not None:
                        self.on_cache(notes)
                    break
                if answer.kind == "gate_busy":
                    asked = False  # nothing was queued: nothing to release
                    message = answer.body.get("message")
                    raise Busy(message if isinstance(message, str) else f"slot {slot} is busy")
                if answer.kind == "gate_queued":
                    on_event(QueuedEvent(gate_fields(answer, "ahead")[1]))
            yield
        finally:
            # Wait until the main process has let the slot or the line go: a request that
            # follows at once must find the slot free, not itself still in the line.
            if asked and self._try_send(gate_frame("gate_release", ask)):
                while (answer := self._next_answer(ask)) is not None:
                    if answer.kind == "gate_left":
                        break


class _Ask:
    """One `gate_ask` held in the SlotGate by a thread, until released."""

    def __init__(self) -> None:
        self.released = threading.Event()


class GateServer:
    """The main process's side of one worker's PipeGate: its asks, held in the shared SlotGate."""

    def __init__(
        self,
        gate: SlotGate,
        send: Send,
        cache: SlotCache | None = None,
        session: Callable[[], str | None] = lambda: None,
        warn: Callable[[str], None] = lambda line: print(f"loopd: {line}", file=sys.stderr),
    ) -> None:
        self._gate = gate
        self._warn = warn
        self._send = send
        self._cache = cache
        self._session = session
        self._lock = threading.Lock()
        self._asks: dict[int, _Ask] = {}
        self._closed = False
        # The epoch the ask held now named (0 until one names it): for the cache keeper's save
        # file, which must not be restored into another epoch (issue 21).
        self.epoch = 0
        # One thread holds this worker's asks, one after another: a PipeGate asks again only
        # once its last ask is let go, so a thread per ask would only add its start-up.
        self._pending: queue.SimpleQueue[tuple[int, int, int, _Ask] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def handle(self, frame: Frame) -> None:
        """A gate frame from the worker (`gate_ask`, `gate_release` or `gate_pick`)."""
        if frame.kind == "gate_pick":
            (ask,) = gate_fields(frame)
            slots = frame.body.get("slots")
            if not (isinstance(slots, list) and slots and all(type(s) is int for s in slots)):
                raise BodyError("gate_pick.slots: expected a list of slot ids")
            self._reply(
                gate_frame("gate_picked", ask, slot=self._gate.pick(tuple(slots), self._session()))
            )
        elif frame.kind == "gate_ask":
            ask, slot = gate_fields(frame, "slot")
            epoch = gate_fields(frame, "epoch")[1] if "epoch" in frame.body else 0
            entry = _Ask()
            with self._lock:
                if self._closed:
                    return
                self._asks[ask] = entry
                if self._thread is None:
                    self._thread = threading.Thread(target=self._serve, name="gate", daemon=True)
                    self._thread.start()
            self._pending.put((ask, slot, epoch, entry))
        elif frame.kind == "gate_release":
            (ask,) = gate_fields(frame)
            with self._lock:
                entry_or_none = self._asks.get(ask)
            if entry_or_none is None:
                self._reply(gate_frame("gate_left", ask))  # nothing held: said at once
            else:
                entry_or_none.released.set()
                self._gate.wake()

    def close(self) -> None:
        """The worker is gone: every ask it held or waited in is let go."""
        with self._lock:
            self._closed = True
            entries, self._asks = list(self._asks.values()), {}
        for entry in entries:
            entry.released.set()
        self._pending.put(None)
        self._gate.wake()

    def _reply(self, data: bytes) -> None:
        with contextlib.suppress(PipeClosed):  # the worker is gone; its reader closes this
            self._send(data)

    def _grant(self, ask: int, slot: int) -> None:
        notes: list[dict[str, Any]] = []
        try:
            cache, session = self._cache, self._session()
            notes = [] if cache is None else cache.before_grant(slot, session, self.epoch)
            grant = gate_frame("gate_grant", ask, **({"cache": notes} if notes else {}))
        except Exception as exc:  # the keeper's bug, or notes that cannot be sent: the turn
            self._warn(f"the slot cache failed before a grant ({type(exc).__name__}: {exc})")
            grant = gate_frame("gate_grant", ask)  # goes on without them, its slot held
        self._reply(grant)

    def _released(self, slot: int) -> None:
        if self._cache is None:
            return
        try:
            self._cache.after_release(slot, self._session(), self.epoch)
        except Exception as exc:  # gate_left must still be sent, or the worker waits for ever
            self._warn(f"the slot cache failed after a release ({type(exc).__name__}: {exc})")

    def turn_over(self) -> None:
        """The worker's turn ended (its final frame came): the keeper's after-turn save, once a
        turn (issue 29.10)."""
        if self._cache is None:
            return
        try:
            self._cache.turn_over(self._session())
        except Exception as exc:
            self._warn(f"the slot cache failed after a turn ({type(exc).__name__}: {exc})")

    def _serve(self) -> None:
        # This thread is the one way this worker's asks are answered: nothing may end it early.
        while (item := self._pending.get()) is not None:
            self._hold(*item)

    def _hold(self, ask: int, slot: int, epoch: int, entry: _Ask) -> None:
        def queued(event: object) -> None:
            assert isinstance(event, QueuedEvent)
            self._reply(gate_frame("gate_queued", ask, ahead=event.ahead))

        answer = gate_frame("gate_left", ask)
        granted = False
        try:
            with self._gate.hold(slot, queued, leave=entry.released.is_set, owner=self._session()):
                if not entry.released.is_set():
                    self.epoch = epoch  # one ask at a time: this worker's, for the keeper
                    self._grant(ask, slot)
                    granted = True
                    entry.released.wait()
                    self._released(slot)
        except Busy as exc:
            answer = gate_frame("gate_busy", ask, message=str(exc))
        except Left:
            pass  # the worker left the line, or went away
        except Exception as exc:  # a bug: the worker still gets its answer, and its turn ends
            self._warn(f"the slot gate failed: {type(exc).__name__}: {exc}")
            if not granted:  # Busy in the worker: its turn ends with an error that says so
                why = f"loopd's slot gate failed ({type(exc).__name__}: {exc}); send it again"
                answer = gate_frame("gate_busy", ask, message=why)
        with self._lock:
            self._asks.pop(ask, None)
        self._reply(answer)
