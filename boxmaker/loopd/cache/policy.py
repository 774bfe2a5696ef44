"""Slot save/restore: which session's prompt cache each slot holds, and what to do about it. [core]

Issue 14. llama-server keeps a slot's prompt cache in memory only: a server restart, another
session on the slot, or the self-test throw it away. With `[cache] slot_save` on, loopd's main
process (which grants the slots) saves a session's cache to a file before anything else uses its
slot, and when the slot has been idle a while, and restores it before the session's next request
when the slot no longer holds it. `Policy` decides; `cache.keeper` asks the server and acts.

What the policy knows of a slot comes from GET /slots, one call before each grant: a `Mark`, the
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

Save files are named `bx-<identity>-<session>.bin` (`save_name`): the identity is a hash of the
model id, the chat template's SHA-256 and the per-slot context size, so a file made under another
model, template or context size is never asked for (llama-server itself restores such a file
without a word: measured with another -c). Session ids are [A-Za-z0-9._-] (proto.ids); the
server's filename check refuses `..`, so dots are written `_d` (and `_` as `__`).

The results come back through `saved`, `restored`, `restore_failed`, `granted` and `released`;
each save or
restore leaves a `Note` for the session's log, which its worker (the log's one writer) appends at
the session's next grant (`take_notes`). `to_json`/`from_json` keep it all across loopd restarts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from boxmaker.proto import sha256_hex

SAVE_PREFIX = "bx-"
PROBE_NAME = "probe"  # the self-test's probe file: bx-<identity>-probe.bin (no session id clashes:
# a probe file is never restored, and a session called "probe" would only overwrite it)
STATE_VERSION = 1


def identity(model: str, template_sha256: str, n_ctx: int) -> str:
    """What a save file must have been made under: 16 hex digits of a hash of the three."""
    return sha256_hex(f"{model}\n{template_sha256}\n{n_ctx}".encode())[:16]


def save_name(ident: str, session: str) -> str:
    """`bx-<identity>-<session>.bin`, the session id with `_` written `__` and `.` written `_d`:
    llama-server refuses a file name holding `..` (a session id may), and the mapping stays
    one-to-one (`session_of` reads it back)."""
    return f"{SAVE_PREFIX}{ident}-{session.replace('_', '__').replace('.', '_d')}.bin"


def session_of(ident: str, filename: str) -> str | None:
    """The session a save file of this identity belongs to, or None for any other file."""
    head, tail = f"{SAVE_PREFIX}{ident}-", ".bin"
    if not (filename.startswith(head) and filename.endswith(tail)):
        return None
    coded, out, i = filename[len(head) : -len(tail)], [], 0
    while i < len(coded):
        if coded[i] == "_":
            pair = coded[i : i + 2]
            if pair not in ("__", "_d"):
                return None
            out.append("_" if pair == "__" else ".")
            i += 2
        else:
            out.append(coded[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Mark:
    """A slot as /slots shows it: its last completion task and its cache's token count."""

    task: int | None
    tokens: int


@dataclass(frozen=True, slots=True)
class SlotIO:
    """A save's or restore's answer: tokens, bytes written or read, and the server's time."""

    tokens: int
    size: int
    elapsed_us: int


@dataclass(frozen=True, slots=True)
class Save:
    slot: int
    session: str
    filename: str


@dataclass(frozen=True, slots=True)
class Restore:
    slot: int
    session: str
    filename: str


Action = Save | Restore


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
        counts = [v for v in values if type(v) is int and v >= 0]
        if len(counts) != len(values):
            raise ValueError(f"a cache note: expected four non-negative integers, got {obj!r:.80}")
        slot, tokens, size, elapsed_us = counts
        return cls(obj["kind"], slot, SlotIO(tokens, size, elapsed_us))


@dataclass(slots=True)
class Held:
    """A slot's cache as far as loopd knows: `session`'s since the slot's `id_task` was `floor`
    (-1: none yet); `saved`: the session's file holds all of it."""

    session: str
    floor: int
    saved: bool


def _floor(mark: Mark) -> int:
    return -1 if mark.task is None else mark.task


class Policy:
    """The state machine over the slots of one server identity. Not thread-safe: one caller."""

    def __init__(self, ident: str, min_tokens: int) -> None:
        self.ident = ident
        self.min_tokens = min_tokens
        self.held: dict[int, Held] = {}
        self.saves: dict[str, int] = {}  # session -> tokens in its save file
        self.notes: dict[str, list[Note]] = {}

    def name(self, session: str) -> str:
        return save_name(self.ident, session)

    def holder(self, slot: int, mark: Mark | None) -> Held | None:
        """Whose cache the slot holds now: the last holder's, unless the server restarted."""
        held = self.held.get(slot)
        if held is None or mark is None or mark.task is None or mark.task < held.floor:
            return None
        return held

    def restarted(self, marks: dict[int, Mark]) -> bool:
        """True when /slots shows a slot's cache lost behind loopd's back (a server restart)."""
        return any(slot in marks and self.holder(slot, marks[slot]) is None for slot in self.held)

    def before(self, slot: int, session: str | None, mark: Mark | None) -> list[Action]:
        """What to do before `session` (None: loopd's own self-test) uses `slot`, which /slots
        shows at `mark` (None: /slots did not say)."""
        held = self.holder(slot, mark)
        if held is not None and held.session == session:
            return []
        actions: list[Action] = []
        long_enough = mark is not None and mark.tokens >= self.min_tokens
        if held is not None and not held.saved and long_enough:
            actions.append(Save(slot, held.session, self.name(held.session)))
        if session is not None and self.saves.get(session, 0) > 0:
            actions.append(Restore(slot, session, self.name(session)))
        return actions

    def idle_save(self, slot: int, mark: Mark | None) -> Save | None:
        """The save due when the slot has been idle (or loopd drains), if any."""
        held = self.holder(slot, mark)
        if held is None or held.saved or mark is None or mark.tokens < self.min_tokens:
            return None
        return Save(slot, held.session, self.name(held.session))

    def saved(self, action: Save, io: SlotIO) -> None:
        self.saves[action.session] = io.tokens
        held = self.held.get(action.slot)
        if held is not None and held.session == action.session:
            held.saved = True
        self.notes.setdefault(action.session, []).append(Note("saved", action.slot, io))

    def restored(self, action: Restore, io: SlotIO, mark: Mark) -> None:
        self.held[action.slot] = Held(action.session, _floor(mark), saved=True)
        self.notes.setdefault(action.session, []).append(Note("restored", action.slot, io))

    def restore_failed(self, action: Restore) -> None:
        """The file is gone or refused: not asked for again until the next save."""
        self.saves.pop(action.session, None)

    def granted(self, slot: int, session: str | None, mark: Mark | None) -> None:
        """`session` (None: the self-test) uses the slot now (after `before`'s actions)."""
        held = self.holder(slot, mark)
        if session is None or mark is None:
            self.held.pop(slot, None)
        elif held is None or held.session != session:
            self.held[slot] = Held(session, _floor(mark), saved=False)

    def released(self, slot: int, session: str | None) -> None:
        """`session`'s request on the slot is over: the cache grew past what its file holds."""
        held = self.held.get(slot)
        if held is not None and held.session == session:
            held.saved = False

    def take_notes(self, session: str) -> list[Note]:
        return self.notes.pop(session, [])

    def forget(self, session: str) -> None:
        """The session's save file was removed (pruned)."""
        self.saves.pop(session, None)

    # ---- across loopd restarts ----
    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "version": STATE_VERSION,
                "identity": self.ident,
                "held": {
                    str(slot): {"session": h.session, "floor": h.floor, "saved": h.saved}
                    for slot, h in self.held.items()
                },
                "saves": self.saves,
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
        if not isinstance(obj, dict) or obj.get("version") != STATE_VERSION:
            raise ValueError(f"expected a version {STATE_VERSION} object")
        if obj.get("identity") != ident:
            return policy  # another model, template or context size: its saves are not ours
        try:
            for slot, h in obj["held"].items():
                if type(h["floor"]) is not int:
                    raise ValueError(f"held[{slot}]: a bad floor")
                policy.held[int(slot)] = Held(str(h["session"]), h["floor"], bool(h["saved"]))
            for session, tokens in obj["saves"].items():
                if type(tokens) is not int:
                    raise ValueError(f"saves[{session}]: not an integer")
                policy.saves[str(session)] = tokens
            for session, notes in obj["notes"].items():
                policy.notes[str(session)] = [Note.from_json(n) for n in notes]
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a missing or mistyped field: {exc}") from None
        return policy


# ---- the server's answers -------------------------------------------------------------------


def parse_marks(body: bytes) -> dict[int, Mark]:
    """GET /slots: each slot's mark. A slot without `n_prompt_tokens` (a fresh server) holds 0.

    Raises:
        ValueError: not an array of objects with integer ids.
    """
    items = _load(body, "/slots")
    if not isinstance(items, list):
        raise ValueError(f"/slots: expected an array, got {items!r:.80}")
    marks = {}
    for item in items:
        if not isinstance(item, dict) or type(item.get("id")) is not int:
            raise ValueError(f"/slots: expected an object with an integer id, got {item!r:.80}")
        task = item.get("id_task")
        tokens = item.get("n_prompt_tokens", 0)
        marks[item["id"]] = Mark(
            task if type(task) is int else None, tokens if type(tokens) is int else 0
        )
    return marks


def parse_io(body: bytes, action: Literal["save", "restore"]) -> SlotIO:
    """The answer to POST /slots/<id>?action=save or restore.

    Raises:
        ValueError: a field is missing or of the wrong type.
    """
    obj = _load(body, action)
    tokens_key, size_key, ms_key = (
        ("n_saved", "n_written", "save_ms")
        if action == "save"
        else ("n_restored", "n_read", "restore_ms")
    )
    timings = obj.get("timings") if isinstance(obj, dict) else None
    tokens = obj.get(tokens_key) if isinstance(obj, dict) else None
    size = obj.get(size_key) if isinstance(obj, dict) else None
    ms = timings.get(ms_key) if isinstance(timings, dict) else None
    if type(tokens) is not int or type(size) is not int or type(ms) not in (int, float):
        raise ValueError(f"the {action} answer lacks {tokens_key}, {size_key} or {ms_key}")
    assert isinstance(ms, int | float)
    return SlotIO(max(tokens, 0), max(size, 0), max(round(ms * 1000), 0))


def _load(body: bytes, what: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError(f"{what}: the answer is not JSON: {body[:80]!r}") from None
