"""The shell around the save/restore policy, in loopd's main process (issue 14).

The main process grants the slots (one SlotGate, a GateServer per worker), so it is the one that
knows which session is about to use a slot and which used it last. The GateServer calls
`before_grant(slot, session, epoch)` once the slot is held for a worker, before it sends
`gate_grant`: the keeper reads /slots, asks the `Policy`, saves the previous holder's cache and
restores this session's as it says, and returns the notes this session's log is owed, which go to
the worker in the grant frame; the worker, the log's one writer, appends them as CacheSaved /
CacheRestored records and sends their events. `after_release(slot, session, epoch)` notes that the
holder's cache grew past its file (no call to the server). Both run while the caller holds the slot,
so no request runs on the slot meanwhile. /props is asked before a save or restore only once a
restart has shown in /slots (the server might now run another model, template or context size).

A thread saves a slot right after a turn (`turn_over(session)`, called once the turn's final frame
is relayed: once per turn, never after each completion of a tool loop, issue 29.10) when
`Policy.after_turn` says a re-read would cost more than `save_factor` saves (the prompt rate is
timed once, by the self-test: `set_prompt_rate`), and a slot whose holder has left it unsaved for
`idle_save_ms`, holding the slot in the gate while it does; `drain()` saves every unsaved slot
when loopd stops. `around_selftest` gives the self-test a slot that holds no session when there
is one, and saves the holder first when there is not. Save files are per epoch (issue 21): an
earlier epoch's goes once a later one asks. Every failure of these calls is one warning line,
never a failed turn: the request then runs as it would without the feature. The policy's state is
kept in the state file after every change, so a restarted loopd knows what each slot holds and
what is saved.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from boxmaker.loopd.config import Config
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.llama.info import Props, template_sha256
from boxmaker.loopd.llama.slots import SlotFiles

from .policy import (
    PREWARM_NAME,
    SAVE_PREFIX,
    Action,
    Drop,
    Mark,
    Restore,
    Save,
    identity,
    marks_of,
)
from .state import STATE_FILE, StateFile

Warn = Callable[[str], None]


def _ignore(_event: object) -> None:
    pass


class CacheKeeper:
    def __init__(
        self,
        config: Config,
        gate: SlotGate,
        ident: str,
        warn: Warn,
        props: Callable[[], Props],
        files: SlotFiles | None = None,
    ) -> None:
        self.cache = config.cache
        self.model = config.inference.model
        self._props = props
        self.slots = config.inference.slots
        self.gate = gate
        self.warn = warn
        self.files = files if files is not None else SlotFiles(config.inference)
        self.state = StateFile(self.cache.state or config.paths.home / STATE_FILE, warn)
        self.policy = self.state.load(ident, self.cache.min_tokens, self.cache.folder)
        # The server answering is known to be of `ident` (the self-test's open_keeper asked
        # /props); cleared when /slots shows a restart, so the next save or restore asks again.
        self._verified = True
        self.probe_marks: dict[int, Mark] | None = None  # the self-test's probe's /slots
        self._lock = threading.Lock()
        self._last_used: dict[int, float] = {}
        self._after_turn: set[int] = set()  # slots whose turn just ended: a save may be due
        self._released: dict[int, str | None] = {}  # the session each slot was last let go by
        self._grant_marks: dict[int, Mark] = {}  # each slot's mark at its last grant
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._prune()  # what aged out while loopd was away

    def _server_identity(self) -> str | None:
        """The identity of the server answering now (None: no answer)."""
        try:
            props = self._props()
        except InferError as exc:
            self.warn(f"cache: GET /props failed ({exc.describe()})")
            return None
        return server_identity(self.model, props)

    def _same_server(self) -> bool:
        """Before any save or restore: the server still runs what the files were made under (a
        restarted server may run another model, template or context size). Asked once after
        each restart /slots shows."""
        if self._verified:
            return True
        found = self._server_identity()
        self._verified = found == self.policy.ident
        if found is not None and found != self.policy.ident:
            self.warn(
                f"cache: the server's model, template or context size changed (identity {found}, "
                f"loopd's files are {self.policy.ident}); no save or restore until loopd restarts"
            )
        return found == self.policy.ident

    # ---- the server ----
    def _marks(self) -> dict[int, Mark]:
        try:
            marks = marks_of(self.files.slots())
        except InferError as exc:
            self.warn(f"cache: GET /slots failed ({exc.describe()})")
            return {}
        if self.policy.restarted(marks):
            self._verified = False
        return marks

    def _act(self, action: Action, slot: int, mark: Mark) -> None:
        """Carries out one action; a failure is a warning."""
        if isinstance(action, Drop):
            self._unlink(action.filename)  # the policy has forgotten it already
            return
        try:
            if isinstance(action, Save):
                io = self.files.save(slot, action.filename)
                self.policy.saved(action, io, int(time.time()))
                self._prune()
            else:
                io = self.files.restore(slot, action.filename)
                self.policy.restored(action, io, mark)  # a restore leaves id_task as it was
        except InferError as exc:
            verb = "save" if isinstance(action, Save) else "restore"
            self.warn(f"cache: {verb} of {action.session} on slot {slot} failed ({exc})")
            if isinstance(action, Restore):
                self.policy.restore_failed(action)

    # ---- around each grant ----
    def before_grant(self, slot: int, session: str | None, epoch: int = 0) -> list[dict[str, Any]]:
        """Called with the slot held for `session`: the saves and restores due, then the notes
        the session's log is owed (JSON, for the grant frame). Never raises: a bug here must not
        leave a worker waiting for its grant."""
        try:
            return self._before_grant(slot, session, epoch)
        except Exception as exc:  # the grant goes out whatever happened here
            self.warn(f"cache: slot {slot} for {session}: {exc!r}; granted without it")
            return []

    def _before_grant(self, slot: int, session: str | None, epoch: int) -> list[dict[str, Any]]:
        with self._lock:
            mark = self._marks().get(slot)
            actions = self.policy.before(slot, session, mark, epoch)
            for drop in [a for a in actions if isinstance(a, Drop)]:
                self._act(drop, slot, Mark(None, 0))  # dead whatever the server: no call to it
            actions = [a for a in actions if not isinstance(a, Drop)]
            if actions and mark is not None and self._same_server():
                for action in actions:
                    self._act(action, slot, mark)
            self.policy.granted(slot, session, mark, epoch)
            if mark is not None:
                self._grant_marks[slot] = mark  # for the after-turn save's bookkeeping
            notes = self.policy.take_notes(session) if session is not None else []
            self.state.persist(self.policy)
        return [note.to_json() for note in notes]

    def after_release(self, slot: int, session: str | None, epoch: int = 0) -> None:
        """Called with the slot still held, once `session`'s request is over (no call to the
        server: the next grant's /slots tells what became of the slot). Never raises: the
        gate's thread must go on to let the slot go. (`epoch`: the grant's, which `before_grant`
        already recorded on the slot.)"""
        try:
            with self._lock:
                self.policy.released(slot, session)
                self._last_used[slot] = time.monotonic()
                self._released[slot] = session  # the after-turn save waits for turn_over
                self.state.persist(self.policy)
            self._wake.set()  # the idle save's timer starts now
        except Exception as exc:
            self.warn(f"cache: after slot {slot} for {session}: {exc!r}")

    def turn_over(self, session: str | None) -> None:
        """`session`'s turn ended (its final frame was relayed): the slots it let go last are
        looked at for the after-turn save, once, whatever number of completions the turn made.
        Never raises."""
        try:
            with self._lock:
                slots = [s for s, who in self._released.items() if who == session]
                for slot in slots:
                    del self._released[slot]
                    self._after_turn.add(slot)
            if slots:
                self._wake.set()
        except Exception as exc:
            self.warn(f"cache: after the turn of {session}: {exc!r}")

    @contextlib.contextmanager
    def around_selftest(self, order: list[int] | None = None) -> Iterator[int]:
        """The slot the self-test should use: the first of `order` (the gate's, least likely to
        hold a live session first) that no session holds, else the first of `order`, its
        holder's cache saved first (then restored at the session's next request)."""
        order = order or list(self.slots)
        with self._lock:
            marks, self.probe_marks = self.probe_marks or self._marks(), None
            free = [s for s in order if self.policy.holder(s, marks.get(s)) is None]
            slot = free[0] if free else order[0]
            mark = marks.get(slot)
            actions = self.policy.before(slot, None, mark)
            if actions and mark is not None and self._same_server():
                for action in actions:
                    self._act(action, slot, mark)
            self.policy.granted(slot, None, mark)
            self.state.persist(self.policy)
        yield slot

    def free_slots(self) -> list[int]:
        """The slots no session's cache is in (loopd's pre-warm reads the baseline into these)."""
        with self._lock:
            marks = self._marks()
            return [s for s in self.slots if self.policy.holder(s, marks.get(s)) is None]

    def copy_slot(self, source: int, dest: int) -> str | None:
        """`source`'s cache into `dest` (a save, then a restore: no prompt read); None when done,
        else why not. Before loopd serves: nothing else uses the slots."""
        name = self.policy.name(PREWARM_NAME, 0)
        try:
            self.files.save(source, name)
            self.files.restore(dest, name)
        except InferError as exc:
            return exc.describe()
        return None

    def set_prompt_rate(self, us: float | None) -> None:
        """The prompt rate the self-test timed (None: unknown), for the after-turn rule."""
        with self._lock:
            self.policy.prompt_us = us

    # ---- idle saves and the drain ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._idle_loop, name="slot-cache", daemon=True)
        self._thread.start()

    def _due(self, now: float) -> tuple[list[int], float | None]:
        """The slots whose unsaved holder has been idle for idle_save_ms, and the seconds until
        the next one will be (None: none is waiting)."""
        idle_s = self.cache.idle_save_ms / 1000
        due: list[int] = []
        next_at: float | None = None
        with self._lock:
            for slot, used in self._last_used.items():
                held = self.policy.held.get(slot)
                if held is None or held.saved:
                    continue
                at = used + idle_s
                if at <= now:
                    due.append(slot)
                else:
                    next_at = at if next_at is None else min(next_at, at)
        return due, None if next_at is None else next_at - now

    def _idle_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                after, self._after_turn = self._after_turn, set()
            for slot in after:
                self._save_after_turn(slot)
            due, wait = self._due(time.monotonic())
            for slot in due:
                self._save_idle(slot)
            if due or after:
                continue
            self._wake.wait(wait)
            self._wake.clear()

    def _save_after_turn(self, slot: int) -> None:
        """The save `Policy.after_turn` asks for, off the request's path: the gate holds the
        slot while it runs, so a request that comes meanwhile waits at most the save's time."""
        with self.gate.hold(slot, _ignore), self._lock:
            mark = self._grant_marks.pop(slot, None)  # no /slots: inferproxy's bucket is shared
            save = self.policy.after_turn(slot, self.cache.save_factor)
            if save is not None and mark is not None and self._same_server():
                self._act(save, slot, mark)
                self.state.persist(self.policy)

    def _save_idle(self, slot: int) -> None:
        with self.gate.hold(slot, _ignore), self._lock:
            mark = self._marks().get(slot)
            save = self.policy.idle_save(slot, mark)
            if save is not None and mark is not None and self._same_server():
                self._act(save, slot, mark)
            elif (held := self.policy.held.get(slot)) is not None:
                held.saved = True  # too short to save, or no longer the slot's: not due again
            self._last_used[slot] = time.monotonic()  # a failed save is tried again later
            self.state.persist(self.policy)

    def drain(self) -> int:
        """Saves every slot whose holder's cache is not saved (loopd is stopping)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.files.config.control_timeout_ms / 1000)
        saved = 0
        with self._lock:
            marks = self._marks()  # the workers have stopped: nothing moves the slots now
        for slot in self.slots:
            with self.gate.hold(slot, _ignore), self._lock:
                mark = marks.get(slot)
                save = self.policy.idle_save(slot, mark)
                if save is not None and mark is not None and self._same_server():
                    self._act(save, slot, mark)
                    saved += 1
                self.state.persist(self.policy)
        return saved

    # ---- the save folder's bounds ----
    def _prune(self) -> None:
        """Forgets saves past max_age_s; with [cache] folder set, removes their files and then
        the oldest past max_bytes. Only this identity's regular files count and go: a link, a
        folder, or another identity's file in a shared folder is left alone."""
        now = int(time.time())
        for session in self.policy.expired(now, self.cache.max_age_s):
            self._remove(self.policy.name(session), session)
        folder = self.cache.folder
        if folder is None:
            return
        head = f"{SAVE_PREFIX}{self.policy.ident}-"
        files: list[tuple[float, int, str]] = []
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            self.warn(f"cache: cannot list {folder} ({exc})")
            return
        for entry in entries:
            if not (entry.name.startswith(head) and entry.name.endswith(".bin")):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISREG(st.st_mode):
                files.append((st.st_mtime, st.st_size, entry.name))
        total = sum(size for _, size, _ in files)
        names = self.policy.by_name()
        for mtime, size, name in sorted(files):
            if total <= self.cache.max_bytes and now - mtime <= self.cache.max_age_s:
                continue
            if self._remove(name, names.get(name)):
                total -= size

    def _remove(self, name: str, session: str | None) -> bool:
        if session is not None:
            self.policy.forget(session)
        return self._unlink(name)

    def _unlink(self, name: str) -> bool:
        """Removes a save file, when loopd knows the server's folder ([cache] folder)."""
        if self.cache.folder is None:
            return True
        try:
            (self.cache.folder / name).unlink()
        except FileNotFoundError:
            return True
        except OSError as exc:
            self.warn(f"cache: cannot remove {self.cache.folder / name} ({exc})")
            return False
        return True


def server_identity(model: str, props: Props) -> str:
    """The identity save files are named with, for the server whose /props this is."""
    return identity(model, template_sha256(props.chat_template), props.n_ctx)
