"""The frames on the pipes between loopd's main process and a session worker. [core]

The framing is the channel's (DECISIONS.md: "the same framing is used on the pipes"); the pipes
add their own kinds. A worker's answers to a turn are the channel's own frames (`turn_event`,
`turn_done`, `error`), so the main process relays them as they are.

| kind           | from   | final | body                                                |
|----------------|--------|-------|-----------------------------------------------------|
| `config`       | main   | false | first, once: the ConfigSource loopd validated       |
| `turn`         | main   | true  | the channel's Turn: `{session, content, resume, thinking}` |
| `turn_event`   | worker | false | the channel's `{event}`                             |
| `turn_done`    | worker | true  | the channel's TurnDone                              |
| `error`        | worker | true  | WireError                                           |
| `gate_ask`     | worker | false | `{ask, slot, epoch?}`: wants the slot (PipeGate.hold)|
| `gate_release` | worker | false | `{ask}`: gives the slot up, or leaves the line      |
| `gate_queued`  | main   | false | `{ask, ahead}`: waiting, with `ahead` before it     |
| `gate_grant`   | main   | false | `{ask, cache?}`: holds the slot now; `cache`: the   |
|                |        |       | saves/restores the session's log is owed (issue 14) |
| `gate_busy`    | main   | false | `{ask, message}`: the line is full; nothing queued  |
| `gate_left`    | main   | false | `{ask}`: the release is done (slot or line let go)  |
| `gate_pick`    | worker | false | `{ask, slots}`: which slot should a new session take |
| `gate_picked`  | main   | false | `{ask, slot}`: this one (SlotGate.pick, issue 19)   |
| `no_session`   | worker | false | `{}`: before a final error, no log is open: stop me |
| `cancel`       | main   | true  | `{}`: the client stopped the turn in flight (issue 30) |

`ask` numbers a worker's requests for the slot, so that an answer to one it has left is told
apart from an answer to the next.
"""

from typing import Any

from boxmaker.proto import BodyError, Turn, channel_frame
from boxmaker.proto.channel import CANCEL as CANCEL  # the worker reads it here
from boxmaker.proto.channel import (
    parse_turn as parse_turn,  # moved to proto (issue 20); kept here for its callers
)
from boxmaker.proto.frame import CHANNEL_KINDS, Frame, encode_frame

GATE_KINDS = frozenset(
    {"gate_ask", "gate_release", "gate_queued", "gate_grant", "gate_busy", "gate_left"}
    | {"gate_pick", "gate_picked"}
)
# A worker whose session did not open (missing, busy, refused) holds nothing worth keeping: it
# says so before its final frame, and loopd stops it then, before the next turn can reach it.
NO_SESSION = "no_session"
# A worker's first frame: the config loopd read and validated (never the file's path, which may
# have changed since).
CONFIG = "config"
PIPE_KINDS: frozenset[str] = CHANNEL_KINDS | GATE_KINDS | {NO_SESSION, CONFIG, CANCEL}
# The channel's frames a worker sends back: relayed to the client as they are.
RELAYED_KINDS = frozenset({"turn_event", "turn_done", "error"})
FINAL_KINDS = frozenset({"turn_done", "error"})


def cancel_frame() -> bytes:
    return encode_frame(CANCEL, {}, True, PIPE_KINDS)


def turn_frame(turn: Turn) -> bytes:
    return channel_frame(turn)


def config_frame(text: str, source: str, base_dir: str, env: dict[str, str]) -> bytes:
    """The fields of loopd's ConfigSource. Raises EncodeError when they do not fit a frame."""
    body = {"text": text, "source": source, "base_dir": base_dir, "env": env}
    return encode_frame(CONFIG, body, False, PIPE_KINDS)


def config_fields(frame: Frame) -> tuple[str, str, str, dict[str, str]]:
    """What `config_frame` wrote. Raises BodyError when the frame is not that."""
    body = frame.body
    text, source, base_dir, env = (body.get(k) for k in ("text", "source", "base_dir", "env"))
    if frame.kind != CONFIG or not all(isinstance(v, str) for v in (text, source, base_dir)):
        raise BodyError(f"expected a config frame with text, source and base_dir, got {frame}")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise BodyError("config.env: expected an object of strings")
    return str(text), str(source), str(base_dir), env


def no_session_frame() -> bytes:
    return encode_frame(NO_SESSION, {}, False, PIPE_KINDS)


def gate_frame(kind: str, ask: int, **fields: Any) -> bytes:
    """One of the gate kinds: `{ask, ...fields}`."""
    if kind not in GATE_KINDS:
        raise ValueError(f"{kind} is not a gate kind")
    return encode_frame(kind, {"ask": ask, **fields}, False, PIPE_KINDS)


def gate_fields(frame: Frame, *names: str) -> tuple[int, ...]:
    """`ask` and the named integer fields of a gate frame.

    Raises:
        BodyError: a field is missing or not a non-negative integer.
    """
    out = []
    for name in ("ask", *names):
        value = frame.body.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BodyError(f"{frame.kind}.{name}: expected a non-negative integer")
        out.append(value)
    return tuple(out)
