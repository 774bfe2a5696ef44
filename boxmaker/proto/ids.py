"""SessionId: the one rule for session ids, checked before any path is built from one.

DECISIONS.md: a session id matches `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`; anything else is refused
with `bad_request` before the filesystem is touched. The first character cannot be `.` or `-`, so
an id is never `.`, `..`, a hidden file or an option, and the set has no `/`, so it is always one
path component.
"""

import re
from typing import NewType

from .errors import BadRequest

SessionId = NewType("SessionId", str)

MAX_SESSION_ID_CHARS = 128

# fullmatch, never match + `$`: `$` also matches before a trailing newline. The classes are spelt
# out rather than \w so that no non-ASCII letter or digit gets in.
SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

SESSION_ID_RULE = (
    "a session id is 1 to 128 characters from A-Z a-z 0-9 . _ -, "
    "and starts with a letter or a digit"
)

# How much of a refused id a message quotes: enough to recognise it, never a whole payload.
_QUOTE_CHARS = 40


class SessionIdError(BadRequest):
    """A session id breaks SESSION_ID_RULE."""


def is_session_id(s: object) -> bool:
    """Whether `s` is a valid session id."""
    return isinstance(s, str) and SESSION_ID_RE.fullmatch(s) is not None


def validate_session_id(s: object) -> SessionId:
    """Returns `s` as a SessionId.

    Raises:
        SessionIdError: `s` is not a string or breaks the rule; the message quotes the start of
            it and states the rule.
    """
    if not isinstance(s, str):
        raise SessionIdError(
            f"session id must be a string, got {type(s).__name__}; {SESSION_ID_RULE}"
        )
    if SESSION_ID_RE.fullmatch(s) is None:
        shown = s if len(s) <= _QUOTE_CHARS else s[:_QUOTE_CHARS] + "..."
        raise SessionIdError(f"session id {shown!r} is refused: {SESSION_ID_RULE}")
    return SessionId(s)


# A client's own name for a turn (M4 section 6: gatewayd's "mm:<post id>"): printable ASCII, no
# space, so it reads the same in a log line, a message and a grep.
CLIENT_REF_RE = re.compile(r"[!-~]{1,128}")
CLIENT_REF_RULE = "1 to 128 printable ASCII characters, no space"


def is_client_ref(s: object) -> bool:
    return isinstance(s, str) and CLIENT_REF_RE.fullmatch(s) is not None
