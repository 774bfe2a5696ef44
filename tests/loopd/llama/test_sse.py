"""boxmaker.loopd.llama.sse: payloads out of a decoded body, `[DONE]`, the line cap. No I/O."""

from __future__ import annotations

import pytest

from boxmaker.loopd.llama.errors import BadResponse
from boxmaker.loopd.llama.sse import EventStream
from tests.support.feed import FEED_MODES

STREAM = (
    b": keep-alive comment\r\n\r\n"
    b'data: {"a":1}\r\n\r\n'
    b'data: {"b":\n'
    b"data: 2}\n\n"
    b"event: ignored\nid: 7\ndata: [DONE]\n\n"
    b'data: {"after":"done"}\n\n'
)


@pytest.mark.parametrize("mode", list(FEED_MODES))
def test_payloads_in_order_up_to_done(mode: str) -> None:
    stream = EventStream(1_048_576)
    out = [p for batch in FEED_MODES[mode](stream.feed, STREAM) for p in batch]
    assert out == [b'{"a":1}', b'{"b":\n2}']
    assert stream.done


def test_nothing_after_done_even_in_the_same_feed() -> None:
    stream = EventStream(1024)
    assert stream.feed(b"data: 1\n\ndata: [DONE]\n\ndata: 2\n\n") == [b"1"]
    assert stream.feed(b"data: 3\n\n") == []


def test_done_only_as_a_whole_payload() -> None:
    stream = EventStream(1024)
    assert stream.feed(b"data: [DONE] \n\ndata: x[DONE]\n\n") == [b"[DONE] ", b"x[DONE]"]
    assert not stream.done


def test_an_unfinished_event_is_held() -> None:
    stream = EventStream(1024)
    assert stream.feed(b"data: 1") == []
    assert stream.feed(b"\n") == []
    assert stream.feed(b"\n") == [b"1"]


def test_line_over_the_cap_is_a_bad_response() -> None:
    stream = EventStream(100)
    assert stream.feed(b"data: " + b"x" * 94 + b"\n\n") == [b"x" * 94]  # 100 bytes: at the cap
    with pytest.raises(BadResponse, match="event stream: SSE line longer than 100 bytes"):
        stream.feed(b"data: " + b"x" * 95)  # no line end needed: the cap fires at once
