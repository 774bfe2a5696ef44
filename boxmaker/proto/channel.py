"""The bodies of the channel's frames on `loop.sock` (M2b section 6), typed and strict.

| kind         | direction | final | body                                   |
|--------------|-----------|-------|----------------------------------------|
| `turn`       | to loopd  | true  | Turn: `{session, content, resume, thinking?, compact?,`  |
|              |           |       | `client_ref?}`                         |
| `turn_event` | from      | false | `{"event": <TurnEvent>}`               |
| `turn_done`  | from      | true  | TurnDone: `{content, usage}`           |
| `error`      | from      | true  | WireError: `{code, message}`           |
| `cancel`     | to loopd  | true  | `{}`: after the turn frame, stop this turn (issue 30) |

A turn_done too large for one frame is sent as `answer_part` events and a shorter turn_done
(`done_frames`): the answer is the parts' texts joined, then turn_done's content.

A TurnEvent is an object tagged by `type`, then its fields in the brief's order, e.g.
`{"type": "progress", "total": 900, "cache": 512, "processed": 128}`. `channel_frame(body)`
encodes any of these as its frame; `decode_body(frame)` turns a frame back into its typed body,
checking `final`. Body errors raise BodyError (a ProtocolError: the edge answers `bad_request`).
"""

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ._codec import (
    BOOL,
    BOOL_OR_ABSENT,
    CLIENT_REF_OR_ABSENT,
    OPT_STR,
    SESSION_ID,
    STR,
    STR_OR_ABSENT,
    UINT,
    JsonObj,
    enum_codec,
    from_obj,
    json_type,
    quote,
    struct,
    to_obj,
    wire,
    wrong,
)
from .errors import BodyError, EncodeError
from .frame import Frame, encode_frame
from .tool import ResultClass
from .wire import WireError


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message for a session. `resume: false` requires that the session does not
    exist yet; `true` that it does. `thinking` (optional): false asks for no reasoning on this
    turn, true for reasoning, None (left out, never null) is loopd's `[loop] thinking`; it changes
    only the generation prompt (DECISIONS.md). `compact: true` (issue 21, `/compact`): no turn,
    the thread is folded into a new epoch now. `client_ref` (optional, M4 section 6): the
    client's name for the turn (`mm:<post id>`), kept in the `User` record; a turn whose
    client_ref the log holds is not run again (its recorded answer, or `error{interrupted}`)."""

    session: str = field(metadata=wire(SESSION_ID))
    content: str = field(metadata=wire(STR))
    resume: bool = field(metadata=wire(BOOL))
    thinking: bool | None = field(default=None, metadata=wire(BOOL_OR_ABSENT))
    compact: bool | None = field(default=None, metadata=wire(BOOL_OR_ABSENT))
    client_ref: str | None = field(default=None, metadata=wire(CLIENT_REF_OR_ABSENT))


# --- turn events: one class per ChatEvent and loop event, tagged by TAG ---------------------------


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    TAG: ClassVar[str] = "queued"
    ahead: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class WaitingEvent:
    TAG: ClassVar[str] = "waiting"
    slot_busy: bool = field(metadata=wire(BOOL))


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    TAG: ClassVar[str] = "progress"
    total: int = field(metadata=wire(UINT))
    cache: int = field(metadata=wire(UINT))
    processed: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class ReasoningEvent:
    TAG: ClassVar[str] = "reasoning"
    text: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class ContentEvent:
    TAG: ClassVar[str] = "content"
    text: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class AnswerPartEvent:
    """A piece of the turn's answer, sent just before a turn_done too large for one frame: the
    answer is every answer_part's text, in order, then turn_done's content (`done_frames`)."""

    TAG: ClassVar[str] = "answer_part"
    text: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class ToolCallStartedEvent:
    TAG: ClassVar[str] = "tool_call_started"
    name: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class ToolResultEvent:
    """The JSON key of `class_` is `class`."""

    TAG: ClassVar[str] = "tool_result"
    name: str = field(metadata=wire(STR))
    class_: ResultClass = field(metadata=wire(enum_codec(ResultClass), key="class"))
    truncated: bool = field(metadata=wire(BOOL))
    # what became of the call (issue 39 item 6): done, denied (the owner said no), timed_out (no
    # answer before brokerd's wait ended), refused (the grants or a bound), cancelled, failed;
    # left out by a loopd that does not say
    outcome: str | None = field(default=None, metadata=wire(STR_OR_ABSENT))


@dataclass(frozen=True, slots=True)
class ApprovalNeededEvent:
    """brokerd holds a call for the owner (issue 22). loopd only relays it: the owner answers
    brokerd on owner.sock, with the call's hash, which `claim` gives."""

    TAG: ClassVar[str] = "approval_needed"
    id: str = field(metadata=wire(STR))
    tool: str = field(metadata=wire(STR))
    summary: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class ThinkingCappedEvent:
    TAG: ClassVar[str] = "thinking_capped"
    tokens: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class RetryingEvent:
    TAG: ClassVar[str] = "retrying"
    attempt: int = field(metadata=wire(UINT))
    after_ms: int = field(metadata=wire(UINT))
    error: str = field(metadata=wire(STR))


@dataclass(frozen=True, slots=True)
class CacheLossEvent:
    TAG: ClassVar[str] = "cache_loss"
    expected: int = field(metadata=wire(UINT))
    got: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class CacheSavedEvent:
    """The session's prompt cache was saved to a file (its CacheSaved record)."""

    TAG: ClassVar[str] = "cache_saved"
    tokens: int = field(metadata=wire(UINT))
    elapsed_us: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class CacheRestoredEvent:
    """The session's saved prompt cache was loaded into its slot (its CacheRestored record)."""

    TAG: ClassVar[str] = "cache_restored"
    tokens: int = field(metadata=wire(UINT))
    elapsed_us: int = field(metadata=wire(UINT))


class CompactStep(enum.StrEnum):
    """A compaction's steps, in order (CompactingEvent.step)."""

    SUMMARISING = "summarising"
    SWITCHING = "switching"
    PREWARMING = "prewarming"


@dataclass(frozen=True, slots=True)
class CompactingEvent:
    """The session's thread is being folded into a new epoch (issue 21): `reason` is
    `threshold`, `context_full` or `asked`; `tokens` the context its last completion left.
    Sent at each step (issue 30.5), so no step of a compaction is silent: `step` is
    `summarising` (the model writes the summary; sent again, at most every half second, with
    `written`, the summary's tokens so far), `switching` (the new epoch's files are written) or
    `prewarming` (the server reads the new epoch's prefix; `progress` events follow)."""

    TAG: ClassVar[str] = "compacting"
    reason: str = field(metadata=wire(STR))
    tokens: int = field(metadata=wire(UINT))
    step: CompactStep = field(metadata=wire(enum_codec(CompactStep)))
    written: int = field(metadata=wire(UINT))


@dataclass(frozen=True, slots=True)
class CompactedEvent:
    """The fold is done: epoch `epoch` began; `before` and `after` are the context in tokens (the
    server's counts: the summary request's prompt, the new epoch's prefix), `elapsed_ms` the whole
    switch, the pre-warm included. `error` is empty, or why nothing was folded."""

    TAG: ClassVar[str] = "compacted"
    epoch: int = field(metadata=wire(UINT))
    before: int = field(metadata=wire(UINT))
    after: int = field(metadata=wire(UINT))
    elapsed_ms: int = field(metadata=wire(UINT))
    error: str = field(metadata=wire(STR))


TurnEvent = (
    QueuedEvent
    | WaitingEvent
    | ProgressEvent
    | ReasoningEvent
    | ContentEvent
    | AnswerPartEvent
    | ToolCallStartedEvent
    | ToolResultEvent
    | ApprovalNeededEvent
    | ThinkingCappedEvent
    | RetryingEvent
    | CacheLossEvent
    | CacheSavedEvent
    | CacheRestoredEvent
    | CompactingEvent
    | CompactedEvent
)

EVENT_TYPES: dict[str, type[TurnEvent]] = {
    c.TAG: c
    for c in (
        QueuedEvent,
        WaitingEvent,
        ProgressEvent,
        ReasoningEvent,
        ContentEvent,
        AnswerPartEvent,
        ToolCallStartedEvent,
        ToolResultEvent,
        ApprovalNeededEvent,
        ThinkingCappedEvent,
        RetryingEvent,
        CacheLossEvent,
        CacheSavedEvent,
        CacheRestoredEvent,
        CompactingEvent,
        CompactedEvent,
    )
}


def event_to_json(event: TurnEvent) -> JsonObj:
    if type(event) not in _EVENT_CLASSES:
        raise EncodeError(f"event: expected a TurnEvent, got {type(event).__name__}")
    return to_obj(event, f"event.{event.TAG}", into={"type": event.TAG})


_EVENT_CLASSES = frozenset(EVENT_TYPES.values())


def event_from_json(obj: object, path: str = "event") -> TurnEvent:
    if not isinstance(obj, dict):
        raise wrong(path, "object", obj)
    if "type" not in obj:
        raise BodyError(f'{path}: missing key "type"')
    tag = obj["type"]
    cls = EVENT_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        shown = quote(tag) if isinstance(tag, str) else json_type(tag)
        raise BodyError(
            f"{path}.type: expected an event type ({', '.join(EVENT_TYPES)}), got {shown}"
        )
    return from_obj(cls, obj, f"{path}.{tag}", extra_keys=("type",))


# --- the end of a turn ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """The last Usage record's fields, without its time."""

    cache_n: int = field(metadata=wire(UINT))
    prompt_n: int = field(metadata=wire(UINT))
    predicted_n: int = field(metadata=wire(UINT))
    reasoning_tokens: int = field(metadata=wire(UINT))
    thinking_capped: bool = field(metadata=wire(BOOL))


@dataclass(frozen=True, slots=True)
class TurnDone:
    """The turn's answer: the last completion's content (null if it had only reasoning)."""

    content: str | None = field(metadata=wire(OPT_STR))
    usage: TurnUsage = field(metadata=wire(struct(TurnUsage)))


ChannelBody = Turn | TurnEvent | TurnDone | WireError

# kind -> the `final` the kind requires. A `turn` is the only frame the channel sends, so it is
# final too.
_FINAL: dict[str, bool] = {
    "turn": True,
    "turn_event": False,
    "turn_done": True,
    "error": True,
}


def channel_frame(body: ChannelBody) -> bytes:
    """The frame that carries `body`, with the kind and `final` the table above gives it."""
    if isinstance(body, Turn):
        return encode_frame("turn", to_obj(body, "turn"), True)
    if isinstance(body, TurnDone):
        return encode_frame("turn_done", to_obj(body, "turn_done"), True)
    if isinstance(body, WireError):
        return encode_frame("error", body.to_json(), True)
    return encode_frame("turn_event", {"event": event_to_json(body)}, False)


# `cancel` (issue 30): the one frame a client may send after its `turn`, on the same connection,
# to stop the turn (Ctrl-C in `bxctl chat`). It is not a ChannelBody: loopd's relay reads it
# with a decoder of its own, and the turn ends in `error{stopped}` with a `stopped` record.
CANCEL = "cancel"
CANCEL_KINDS = frozenset({CANCEL})


def cancel_frame() -> bytes:
    return encode_frame(CANCEL, {}, True, CANCEL_KINDS)


# An answer_part's text, in characters: at most 6 bytes each once in JSON ("\u001f"), so a part's
# frame stays well under MAX_FRAME_BYTES whatever the text.
ANSWER_PART_CHARS = 131_072


def done_frames(done: TurnDone) -> list[bytes]:
    """The frames that end a turn: its turn_done, or, when the answer is too large for one frame,
    `answer_part` events carrying its head and a turn_done carrying the rest, so an answer of
    any size reaches the client."""
    try:
        return [channel_frame(done)]
    except EncodeError:
        if done.content is None or len(done.content) <= ANSWER_PART_CHARS:
            raise
    text, n = done.content, ANSWER_PART_CHARS
    cut = (len(text) - 1) // n * n  # the last part (1 to n characters) stays in turn_done
    parts = [channel_frame(AnswerPartEvent(text[i : i + n])) for i in range(0, cut, n)]
    return [*parts, channel_frame(TurnDone(text[cut:], done.usage))]


def decode_body(frame: Frame) -> ChannelBody:
    """The typed body of a channel frame.

    Raises:
        BodyError: the kind is not a channel kind, `final` is not what the kind requires, or the
            body breaks its type; the message names the field.
    """
    kind = frame.kind
    if kind not in _FINAL:
        raise BodyError(f"frame kind {quote(kind)} is not a channel kind ({', '.join(_FINAL)})")
    need = _FINAL[kind]
    if frame.final is not need:
        raise BodyError(f"{kind}: final must be {str(need).lower()}")
    body: Any = frame.body
    if kind == "turn":
        return from_obj(Turn, body, "turn")
    if kind == "turn_done":
        return from_obj(TurnDone, body, "turn_done")
    if kind == "error":
        return WireError.from_json(body)
    if not isinstance(body, dict):
        raise wrong("turn_event", "object", body)
    if "event" not in body or len(body) != 1:
        raise BodyError('turn_event: the body is {"event": {...}} and nothing else')
    return event_from_json(body["event"], "turn_event.event")


def parse_turn(frame: Frame) -> Turn:
    """The Turn a `turn` frame carries (`thinking` left out is true).

    Raises:
        BodyError: not a `turn`, `final` not true, a key missing, unknown or of the wrong type,
            or a session id that breaks the rule; the message names the field.
    """
    if frame.kind != "turn":
        raise BodyError(f"expected a turn frame, got {frame.kind}")
    turn = decode_body(frame)
    assert isinstance(turn, Turn)  # decode_body gives a Turn for kind `turn`
    return turn
