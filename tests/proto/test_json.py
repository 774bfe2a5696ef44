"""boxmaker.proto.load_json / load_json_object: the one reader of JSON text, and its messages."""

from collections.abc import Callable

import pytest

from boxmaker.proto import FrameError, load_json, load_json_object


@pytest.mark.parametrize("data", [b'{"a": [1, "\xc3\xa9"]}', '{"a": [1, "\u00e9"]}'])
def test_an_object_reads_from_bytes_and_from_str(data: bytes | str) -> None:
    assert load_json_object(data, "x", ValueError) == {"a": [1, "\u00e9"]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a": "\xc3\x28"}', "frame is not UTF-8 (invalid continuation byte at byte 7)"),
        (b"\xff", "frame is not UTF-8 (invalid start byte at byte 0)"),
        (b'{"a": ', "frame is not JSON (unexpected end of data"),
        ('{"a": ', "frame is not JSON (unexpected end of data"),
        (b"", "frame is not JSON (Input is a zero-length"),
        (b'{"a": "\\ud800"}', "frame is not JSON ("),  # a lone surrogate: UTF-8, but not JSON
        (b"{} x", "frame is not JSON (unexpected content after document"),
        (b"[]", "frame is not a JSON object (got array)"),
        (b'"s"', "frame is not a JSON object (got string)"),
        (b"null", "frame is not a JSON object (got null)"),
        (b"1.5", "frame is not a JSON object (got number)"),
    ],
)
def test_each_failure_is_said_one_way_through_the_callers_error(data: bytes, message: str) -> None:
    with pytest.raises(FrameError) as info:
        load_json_object(data, "frame", FrameError)
    assert str(info.value).startswith(message), str(info.value)
    shows_chain = info.value.__cause__ or (
        info.value.__context__ and not info.value.__suppress_context__
    )
    assert not shows_chain, "the parser's own exception is not chained on"


def test_load_json_takes_any_value_and_the_error_maker_can_add_to_the_message() -> None:
    assert load_json(b"[1, null]", "x", ValueError) == [1, None]
    body = b"<html>oops</html>"
    make: Callable[[str], Exception] = lambda m: KeyError(f"{m}: {body[:6]!r}")  # noqa: E731
    with pytest.raises(KeyError, match=r"/slots: the answer is not JSON \(.*\): b'<html>'"):
        load_json(body, "/slots: the answer", make)
