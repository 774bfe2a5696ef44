"""Error codes and the error body every `error` frame carries (DECISIONS.md, M2b section 6).

`WireError` is `{"code": "...", "message": "..."}`. The message is for a person: it says what was
wrong and, where there is one, what to do.
"""

import enum
from dataclasses import dataclass, field
from typing import Self

from ._codec import STR, JsonObj, enum_codec, from_obj, to_obj, wire


class ErrorCode(enum.StrEnum):
    """Every code an `error` frame can carry; nothing else is valid on the wire."""

    BAD_REQUEST = "bad_request"  # a frame or body the peer sent is malformed or refused
    INTERNAL = "internal"  # a bug on this side
    UNAVAILABLE = "unavailable"  # this side cannot serve now (starting, stopping)
    SESSION_FULL = "session_full"  # the context is full: the server answered 400
    TURN_LIMIT = "turn_limit"  # tool_iterations reached, or a repeated call repeated again
    SESSION_BUSY = "session_busy"  # another turn holds the session's lock
    NO_SUCH_SESSION = "no_such_session"  # `resume: true` for a session that does not exist
    SESSION_EXISTS = "session_exists"  # `resume: false` for a session that exists
    INFERENCE = "inference"  # the inference path failed after its retries
    STOPPED = "stopped"  # the owner stopped the turn (a `cancel` frame); the log says so
    # a turn whose client_ref the log already holds, and the log shows it was cut (M4 section 6):
    # it is not run again, since its tools may have run; the owner decides whether to ask again
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class WireError:
    code: ErrorCode = field(metadata=wire(enum_codec(ErrorCode)))
    message: str = field(metadata=wire(STR))

    def to_json(self) -> JsonObj:
        return to_obj(self, "error")

    @classmethod
    def from_json(cls, obj: object, path: str = "error") -> Self:
        return from_obj(cls, obj, path)
