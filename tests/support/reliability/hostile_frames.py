"""Bad channel frames for the hostile-client tests (tests/reliability): framing helpers and a
Hypothesis strategy for a `turn` frame with one field of the wrong type.

A turn frame is `{"kind": "turn", "final": true, "body": {session, content, resume, thinking}}`;
`wrong_type_bodies()` replaces exactly one of those seven values with a JSON value of another
type, so every example is invalid by construction. (`thinking` is never given null: it may
become optional.)
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

FIELDS = ("session", "content", "resume")  # body fields whose null is always refused
STRING, BOOL, OBJECT = "string", "bool", "object"
TYPES = {
    "session": STRING,
    "content": STRING,
    "resume": BOOL,
    "thinking": BOOL,
    "kind": STRING,
    "final": BOOL,
    "body": OBJECT,
}


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def turn_frame(**changes: Any) -> dict[str, Any]:
    """A valid turn frame as an object, with `changes` applied to the body or the frame."""
    body: dict[str, Any] = {"session": "s", "content": "hi", "resume": False, "thinking": True}
    frame: dict[str, Any] = {"kind": "turn", "final": True, "body": body}
    for key, value in changes.items():
        (frame if key in frame else body)[key] = value
    return frame


def turn_body(**changes: Any) -> bytes:
    return framed(orjson.dumps(turn_frame(**changes)))


_JSON_INTS = st.integers(-(2**63), 2**64 - 1)  # what orjson can write
_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    STRING: st.text(max_size=30),
    BOOL: st.booleans(),
    OBJECT: st.dictionaries(st.text(max_size=5), _JSON_INTS, max_size=3),
}
_OTHERS = st.one_of(
    _JSON_INTS,
    st.floats(allow_nan=False),
    st.lists(_JSON_INTS, max_size=3),
)


def _wrong(field: str) -> st.SearchStrategy[Any]:
    kind = TYPES[field]
    others = [s for k, s in _SCALARS.items() if k != kind]
    nulls = [] if field == "thinking" else [st.none()]
    # Strings of the valid kind's literal stay wrong only for non-strings, e.g. "true" for a bool.
    return st.one_of(_OTHERS, *others, *nulls)


@st.composite
def wrong_type_bodies(draw: st.DrawFn) -> bytes:
    field = draw(st.sampled_from(sorted(TYPES)))
    return turn_body(**{field: draw(_wrong(field))})
