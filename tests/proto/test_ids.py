"""SessionId: the DECISIONS.md rule, at its edges."""

import pytest

from boxmaker.proto.errors import BadRequest, ProtocolError
from boxmaker.proto.ids import (
    SESSION_ID_RULE,
    SessionIdError,
    is_session_id,
    validate_session_id,
)

VALID = [
    "a",
    "Z",
    "0",
    "a" * 128,
    "2026-11-30T03.48.37_x-y",
    "a..b",  # one path component that is not `..`: harmless
    "a.",
    "a-",
    "A_b.C-9",
]

INVALID = [
    ("", "empty"),
    ("a" * 129, "129 characters"),
    (".hidden", "leading dot"),
    ("-rf", "leading dash, would read as an option"),
    ("_x", "leading underscore"),
    (".", "dot"),
    ("..", "dot dot"),
    ("../etc", "traversal"),
    ("a/b", "slash"),
    ("a\\b", "backslash"),
    ("abc\n", "newline at the end: `$` would match before it"),
    ("\nabc", "newline at the start"),
    ("a b", "space"),
    ("a\x00", "NUL"),
    ("é", "non-ASCII letter"),
    ("a\u0661", "non-ASCII digit (Arabic-Indic one)"),
    ("\uff58", "fullwidth letter"),
    ("a:b", "colon"),
]


@pytest.mark.parametrize("s", VALID)
def test_valid_ids_are_returned_unchanged(s: str) -> None:
    assert validate_session_id(s) == s
    assert is_session_id(s)


@pytest.mark.parametrize(("s", "why"), INVALID, ids=[w for _, w in INVALID])
def test_invalid_ids_are_refused_with_the_rule(s: str, why: str) -> None:
    assert not is_session_id(s)
    with pytest.raises(SessionIdError) as info:
        validate_session_id(s)
    assert SESSION_ID_RULE in str(info.value)
    assert isinstance(info.value, BadRequest)
    assert isinstance(info.value, ProtocolError)


def test_the_message_quotes_the_start_of_a_long_id_only() -> None:
    with pytest.raises(SessionIdError) as info:
        validate_session_id("/" + "x" * 10_000)
    assert "'/xxxxxxxxx" in str(info.value)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("s", [None, 5, b"abc", ["a"]])
def test_non_strings_are_refused(s: object) -> None:
    assert not is_session_id(s)
    with pytest.raises(SessionIdError, match="must be a string"):
        validate_session_id(s)
