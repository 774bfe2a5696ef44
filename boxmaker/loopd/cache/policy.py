"""Slot save/restore: which session's prompt cache each slot holds, and what to do about it. [core]

Issue 14. llama-server keeps a slot's prompt cache in memory only: a server restart, another
session on the slot, or the self-test throw it away. With `[cache] slot_save` on, loopd's main
process (which grants the slots) saves a session's cache to a file before anything else uses its
slot, and when the slot has been idle a while, and restores it before the session's next request
when the slot no longer holds it. `Policy` decides; `cache.keeper` asks the server and acts.

What the policy knows of a slot comes from GET /slots (llama.info's parser), one call before each
grant: a `Mark`, the
slot's `id_task` (the last completion task it ran; task ids only grow over a server's life) and
`n_prompt_tokens` (how many tokens its cache holds). Every request on a slot goes through loopd's
gate, so after a session's request the slot holds that session's cache until loopd itself lets
something else use it; the one thing that can change it behind loopd's back is a server restart.
So the policy records, at each grant, the slot's `id_task` as the holder's floor: while /slots
shows an `id_task` at or above it, the slot still holds the holder's cache. A restarted server
shows no `id_task` (or a lower one), and the slot's cache is gone (`restarted`). Save, restore and
erase do not move `id_task` (measured). Nothing is asked after a request: one short call per
request is all the policy costs when the same session keeps its slot (inferproxy's accept bucket,
2 connections a second, is shared with every request).

The rules, each request before its grant (`before`):
- the slot still holds this session's cache: nothing. A restore could only be
  older and shorter, so it is never done over a slot that still holds the session.
- the slot still holds another session's cache that is not saved: `Save` it first (at least
  `min_tokens`: below that the re-read is cheaper than the file);
- this session has a save (of this identity) and the slot does not hold it: `Restore` it.

And after each request (`after_turn`): `Save` the slot's unsaved holder when re-reading its cache
(`prompt_us`, timed at start-up) would cost more than `factor` times saving it (`save_us`, from
each save's answer); the idle and hand-over saves stay as they are.

Save files are named `bx-<identity>-<hash>-e<epoch>.bin` (`save_name`): the identity is a hash of
the model id, the chat template's SHA-256 and the per-slot context size, so a file made under
another model, template or context size is never asked for (llama-server itself restores such a file
without a word: measured with another -c); the hash is 32 hex digits of the session id's SHA-256, so
every id makes a short name the server's filename check takes (a 128-character id written out made a
279-character name, refused `400 Invalid filename`). The state maps sessions to names.

Epochs (issue 21): epoch n+1's prefix differs from epoch n's from the summary section on, so
holders and saves carry their epoch; a save is restored only into its own epoch; once epoch n+1
asks, epoch n's save is dropped (`Drop`: its file goes) and a slot still holding epoch n is never
saved. A new epoch's first release (the pre-warm) is saved whatever the cost rule says
(docs/decisions/compaction.md).

Every number from outside (the server's answers, the state file) is bounded where it enters
(`MAX_COUNT`), so nothing downstream can fail to encode it.

The results come back through `saved`, `restored`, `restore_failed`, `granted` and `released`;
each save or
restore leaves a `Note` for the session's log, which its worker (the log's one writer) appends at
the session's next grant (`take_notes`). `to_json`/`from_json` keep it all across loopd restarts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import orjson

from boxmaker.loopd.llama.info import MAX_COUNT, SlotIO, SlotState
from boxmaker.proto import is_session_id, sha256_hex

__all__ = ["MAX_COUNT", "SlotIO"]  # the llama/ parser's results, named where the policy uses them

SAVE_PREFIX = "bx-"
PREWARM_NAME = "prewarm"  # the baseline slot loopd copies into the others at start (prewarm.py)
PROBE_NAME = "probe"  # the self-test's probe file is named as its session (no clash with one:
# a probe file is never restored, and a session called "probe" would only overwrite it)
# 1 named files by the escaped session id, 2 had no epochs: their files are not looked for (an
# older state is read as empty; the folder's age and size bounds remove the files).
STATE_VERSION = 3
MAX_NOTES = 16  # per session: the oldest go first (a session that never comes back owes few)


def identity(model: str, template_sha256: str, n_ctx: int) -> str:
    """What a save file must have been made under: 16 hex digits of a hash of the three."""
    return sha256_hex(f"{model}\n{template_sha256}\n{n_ctx}".encode())[:16]


def save_name(ident: str, session: str, epoch: int) -> str:
    """`bx-<identity>-<32 hex digits of the session id's SHA-256>-e<epoch>.bin`: short and plain
    whatever the id (llama-server refuses a name over 255 characters, or holding `..`)."""
    return f"{SAVE_PREFIX}{ident}-{sha256_hex(session.encode())[:32]}-e{epoch}.bin"


@dataclass(frozen=True, slots=True)
class Mark:
    """A slot as /slots shows it: its last completion task and its cache's token count."""

    task: int | None
    tokens: int


@dataclass(frozen=True, slots=True)
class Save:
    slot: int
    session: str
    filename: str
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Restore:
    slot: int
    session: str
    filename: str
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Drop:
    """An earlier epoch's save, dead since a later epoch asked: its file is to be removed (the
    policy has already forgotten it)."""

    session: str
    filename: str


Action = Save | Restore | Drop


@dataclass(frozen=True, slots=True)
class Note:
    """One save or restore, for the session's log (a CacheSaved or CacheRestored record)."""

    kind: Literal["saved", "restored"]
    slot: int
    io: SlotIO

    def to_json(self) -> dict[str, Any]:
        io = self.io
        return {
            "kind": self.kind,
            "slot": self.slot,
            "tokens": io.tokens,
            "size": io.size,
            "elapsed_us": io.elapsed_us,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Note:
        """Raises ValueError on anything but what `to_json` writes."""
        if not isinstance(obj, dict) or obj.get("kind") not in ("saved", "restored"):
            raise ValueError(f"a cache note: expected kind saved or restored, got {obj!r:.80}")
        values = [obj.get(k) for k in ("slot", "tokens", "size", "elapsed_us")]
        counts = [v for v in values if type(v) is int and 0 <= v <= MAX_COUNT]
        if len(counts) != len(values):
            raise ValueError(
                f"a cache note: expected four integers from 0 to {MAX_COUNT}, got {obj!r:.80}"
            )
        slot, tokens, size, elapsed_us = counts
        return cls(obj["kind"], slot, SlotIO(tokens, size, elapsed_us))


@dataclass(slots=True)
class Held:
    """A slot's cache as far as loopd knows: `session`'s (in `epoch`) since the slot's `id_task`
    was `floor` (-1: none yet); `saved`: the session's file holds all of it."""

    session: str
    floor: int
    saved: bool
    epoch: int = 0


def marks_of(states: tuple[SlotState, ...]) -> dict[int, Mark]:
    """Each slot's mark, from GET /slots as llama.info parses it."""
    return {s.id: Mark(s.id_task, s.n_prompt_tokens) for s in states}


def _floor(mark: Mark) -> int:
    return -1 if mark.task is None else mark.task


class Policy:
    """The state machine over the slots of one server identity. Not thread-safe: one caller."""

    def __init__(self, ident: str, min_tokens: int) -> None:
        self.ident = ident
        self.min_tokens = min_tokens
        self.held: dict[int, Held] = {}
        self.saves: dict[str, int] = {}  # session -> tokens in its save file
        self.saved_at: dict[str, int] = {}  # session -> when its file was written (Unix s)
        self.epochs: dict[str, int] = {}  # session -> the epoch its save file holds
        self.latest: dict[str, int] = {}  # session -> the latest epoch seen asking (not kept)
        self.notes: dict[str, list[Note]] = {}
        # What this server was measured to cost, in microseconds per token: reading a prompt
        # (at start-up), and saving (each save's answer; None until the first).
        self.prompt_us: float | None = None
        self.save_us: float | None = None

    def name(self, session: str, epoch: int | None = None) -> str:
        """The file of `session`'s save in `epoch` (None: the epoch it holds)."""
        return save_name(
            self.ident, session, self.epochs.get(session, 0) if epoch is None else epoch
        )

    def _live(self, held: Held) -> bool:
        """The held cache is of its session's latest epoch (an earlier one is not worth a save)."""
        return held.epoch >= self.latest.get(held.session, 0)

    def _save(self, slot: int, held: Held) -> Save:
        return Save(slot, held.session, self.name(held.session, held.epoch), held.epoch)

    def holder(self, slot: int, mark: Mark | None) -> Held | None:
        """Whose cache the slot holds now: the last holder's, unless the server restarted."""
        held = self.held.get(slot)
        if held is None or mark is None or mark.task is None or mark.task < held.floor:
            return None
        return held

    def restarted(self, marks: dict[int, Mark]) -> bool:
        """True when /slots shows a slot's cache lost behind loopd's back (a server restart)."""
        return any(slot in marks and self.holder(slot, marks[slot]) is None for slot in self.held)

    def before(
        self, slot: int, session: str | None, mark: Mark | None, epoch: int = 0
    ) -> list[Action]:
        """What to do before `session` (None: loopd's own self-test), in `epoch`, uses `slot`,
        which /slots shows at `mark` (None: /slots did not say)."""
        actions: list[Action] = []
        if session is not None:
            self.latest[session] = max(self.latest.get(session, 0), epoch)
            if session in self.saves and self.epochs.get(session, 0) < epoch:
                actions.append(Drop(session, self.name(session)))  # dead once a later epoch asks
                for kept in (self.saves, self.saved_at, self.epochs):
                    kept.pop(session, None)  # its notes stay: the log is still owed them
        held = self.holder(slot, mark)
        if held is not None and held.session == session and held.epoch == epoch:
            return actions
        long_enough = mark is not None and mark.tokens >= self.min_tokens
        # The asker's own earlier epoch on the slot is dead, not saved (nor a stray later one).
        if held is not None and held.session != session and not held.saved and long_enough:
            actions += [self._save(slot, held)] if self._live(held) else []
        saved = session is not None and self.saves.get(session, 0) > 0
        if session is not None and saved and self.epochs.get(session, 0) == epoch:
            actions.append(Restore(slot, session, self.name(session, epoch), epoch))
        return actions

    def idle_save(self, slot: int, mark: Mark | None) -> Save | None:
        """The save due when the slot has been idle (or loopd drains), if any."""
        held = self.holder(slot, mark)
        if held is None or held.saved or mark is None or mark.tokens < self.min_tokens:
            return None
        return self._save(slot, held) if self._live(held) else None

    def after_turn(self, slot: int, factor: int) -> Save | None:
        """The save due right after a request (issue 19): when re-reading the slot's cache
        would cost more than `factor` times saving it, at the per-token rates measured here.
        Nothing before the prompt rate is known; a save when only the save cost is unknown
        (that save measures it)."""
        held = self.held.get(slot)  # the request just released: its session holds the slot
        if held is None or held.saved or not self._live(held):
            return None
        if held.epoch > 0 and self.epochs.get(held.session) != held.epoch:
            return self._save(slot, held)  # a new epoch's first release: the pre-warm, saved
        if self.prompt_us is None:
            return None
        # Both costs grow with the cache's size, so their ratio decides, and nothing is asked of
        # the server but the save (a server restarted mid-turn got the retry's whole prompt).
        if self.save_us is not None and self.prompt_us <= factor * self.save_us:
            return None
        return self._save(slot, held)

    def saved(self, action: Save, io: SlotIO, now: int = 0) -> None:
        """The save is done (`now`: the wall clock, epoch seconds, for the age bound)."""
        self.saves[action.session] = io.tokens
        self.saved_at[action.session] = now
        self.epochs[action.session] = action.epoch
        if io.tokens >= self.min_tokens and io.tokens > 0:
            rate = io.elapsed_us / io.tokens
            self.save_us = rate if self.save_us is None else (self.save_us + rate) / 2
        held = self.held.get(action.slot)
        if held is not None and held.session == action.session and held.epoch == action.epoch:
            held.saved = True
        self._note(action.session, Note("saved", action.slot, io))

    def _note(self, session: str, note: Note) -> None:
        notes = self.notes.setdefault(session, [])
        notes.append(note)
        del notes[:-MAX_NOTES]

    def restored(self, action: Restore, io: SlotIO, mark: Mark) -> None:
        self.held[action.slot] = Held(action.session, _floor(mark), True, action.epoch)
        self._note(action.session, Note("restored", action.slot, io))

    def restore_failed(self, action: Restore) -> None:
        """The file is gone or refused: not asked for again until the next save."""
        self.saves.pop(action.session, None)

    def granted(self, slot: int, session: str | None, mark: Mark | None, epoch: int = 0) -> None:
        """`session` (None: the self-test) uses the slot now (after `before`'s actions)."""
        held = self.holder(slot, mark)
        if session is None or mark is None:
            self.held.pop(slot, None)
        elif held is None or held.session != session or held.epoch != epoch:
            self.held[slot] = Held(session, _floor(mark), False, epoch)

    def released(self, slot: int, session: str | None) -> None:
        """`session`'s request on the slot is over: the cache grew past what its file holds."""
        held = self.held.get(slot)
        if held is not None and held.session == session:
            held.saved = False

    def take_notes(self, session: str) -> list[Note]:
        return self.notes.pop(session, [])

    def forget(self, session: str) -> None:
        """The session's save file is gone (pruned, aged out, or removed behind loopd's back):
        nothing is kept of it but what its slot holds."""
        self.saves.pop(session, None)
        self.saved_at.pop(session, None)
        self.epochs.pop(session, None)
        if not any(h.session == session for h in self.held.values()):
            self.notes.pop(session, None)

    def by_name(self) -> dict[str, str]:
        """Each saved session by its file's name (the folder's bound reads names back)."""
        return {self.name(session): session for session in self.saves}

    def expired(self, now: int, max_age_s: int) -> list[str]:
        """The sessions whose save is older than `max_age_s` (their files are due to go)."""
        return [s for s, at in self.saved_at.items() if now - at > max_age_s]

    # ---- across loopd restarts ----
    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "version": STATE_VERSION,
                "identity": self.ident,
                "held": {str(slot): asdict(h) for slot, h in self.held.items()},
                "saves": {
                    s: {"tokens": n, "at": self.saved_at.get(s, 0), "epoch": self.epochs.get(s, 0)}
                    for s, n in self.saves.items()
                },
                "notes": {s: [n.to_json() for n in notes] for s, notes in self.notes.items()},
            }
        )

    @classmethod
    def from_json(cls, data: bytes, ident: str, min_tokens: int) -> Policy:
        """The state `to_json` wrote, when it was kept under the same identity; else a new one.

        Raises:
            ValueError: the data is not what `to_json` writes.
        """
        policy = cls(ident, min_tokens)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if isinstance(obj, dict) and obj.get("version") in (1, 2):
            return policy  # an older loopd's: its files are named otherwise, and not looked for
        if not isinstance(obj, dict) or obj.get("version") != STATE_VERSION:
            raise ValueError(f"expected a version {STATE_VERSION} object")
        if obj.get("identity") != ident:
            return policy  # another model, template or context size: its saves are not ours
        try:
            for slot, h in obj["held"].items():
                policy.held[_count(slot, "held")] = Held(
                    _session(h["session"]),
                    _floor_of(h["floor"]),
                    bool(h["saved"]),
                    _count(h["epoch"], "held epoch"),
                )
            for session, saved in obj["saves"].items():
                policy.saves[_session(session)] = _count(saved["tokens"], session)
                policy.saved_at[session] = _count(saved["at"], session)
                policy.epochs[session] = _count(saved["epoch"], session)
            for session, notes in obj["notes"].items():
                policy.notes[_session(session)] = [Note.from_json(n) for n in notes][-MAX_NOTES:]
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a missing or mistyped field: {exc}") from None
        return policy


def _session(value: object) -> str:
    if not isinstance(value, str) or not is_session_id(value):
        raise ValueError(f"not a session id: {value!r:.80}")
    return value


def _count(value: object, where: str) -> int:
    """A count in the state file (a slot as a string too), refused outside 0..MAX_COUNT."""
    if isinstance(value, str) and value.isdigit() and len(value) < 8:
        value = int(value)
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{where}: expected an integer from 0 to {MAX_COUNT}, got {value!r:.80}")
    return value


def _floor_of(value: object) -> int:
    if type(value) is not int or not -1 <= value <= MAX_COUNT:
        raise ValueError(f"a held slot's floor: expected -1 to {MAX_COUNT}, got {value!r:.80}")
    return value
