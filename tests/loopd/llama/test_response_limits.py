"""Issue 9, the cores: what one response may hold, and what counts as progress. No I/O.

The same rules are run end to end, through a real inferproxy and a hostile server, in
test_hostile_upstream.py; here each is pinned where it is decided (`http`, `assemble`, `request`).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from boxmaker.loopd.llama.assemble import Assembler, CompletionLimits
from boxmaker.loopd.llama.errors import BadResponse, ConnectFailed
from boxmaker.loopd.llama.http import HeadParser, ResponseHead, body_decoder
from boxmaker.loopd.llama.request import chat_body
from boxmaker.loopd.llama.types import ChatRequest
from boxmaker.proto import NEED_DATA, UserMessage
from tests.support.client import chunk_obj, make_config
from tests.support.feed import FEED_MODES, pieces_at

MODES = list(FEED_MODES)
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def pieces(mode: str, data: bytes) -> list[bytes]:
    if mode == "whole":
        return [data]
    if mode == "bytewise":
        return [data[i : i + 1] for i in range(len(data))]
    return pieces_at(data, [len(data) // 3, 2 * len(data) // 3])


def head_of(data: bytes, mode: str = "whole", eof: bool = True, **limits: int) -> ResponseHead:
    """Feeds `data` (then EOF) to a HeadParser; the head, or what it raises."""
    parser = HeadParser(limits.pop("max_header_bytes", 16_384), **limits)
    for piece in [*pieces(mode, data), *([b""] if eof else [])]:
        parser.receive_data(piece)
        head = parser.next_head()
        if head is not NEED_DATA:
            assert isinstance(head, ResponseHead)
            return head
    raise AssertionError("NEED_DATA after the last byte")


# ---- interim heads -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_interim_heads_up_to_the_limit_are_skipped(mode: str) -> None:
    head = head_of(CONTINUE * 3 + OK_HEAD, mode, max_interim_heads=3)
    assert head.status == 200


@pytest.mark.parametrize("mode", MODES)
def test_one_interim_head_past_the_limit_is_refused(mode: str) -> None:
    with pytest.raises(BadResponse, match=r"more than 3 interim \(1xx\) heads"):
        head_of(CONTINUE * 4 + OK_HEAD, mode, max_interim_heads=3)


def test_continue_for_ever_is_refused_without_eof() -> None:
    # The server never stops: the parser must give up on its own, not wait for a close.
    parser = HeadParser(16_384, 8)
    for _ in range(8):
        parser.receive_data(CONTINUE)
        assert parser.next_head() is NEED_DATA
    parser.receive_data(CONTINUE)
    with pytest.raises(BadResponse, match="interim"):
        parser.next_head()


def test_interim_heads_count_against_the_one_head_cap() -> None:
    # Each head fits the cap alone; together they do not.
    big_interim = b"HTTP/1.1 103 Early Hints\r\nLink: " + b"a" * 600 + b"\r\n\r\n"
    assert len(big_interim) * 2 + len(OK_HEAD) == 1310
    assert head_of(big_interim * 2 + OK_HEAD, max_header_bytes=1310).status == 200
    with pytest.raises(BadResponse, match=r"heads longer than 1309 bytes in all \(2 interim"):
        head_of(big_interim * 2 + OK_HEAD, max_header_bytes=1309)


@pytest.mark.parametrize("mode", MODES)
def test_101_switching_protocols_is_a_protocol_error(mode: str) -> None:
    data = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" + OK_HEAD
    with pytest.raises(BadResponse, match="101 Switching Protocols"):
        head_of(data, mode)


# ---- connect or protocol -----------------------------------------------------------------------


def test_no_byte_at_all_is_connect() -> None:
    with pytest.raises(ConnectFailed, match="without answering"):
        head_of(b"")


@pytest.mark.parametrize(
    "data", [b"H", b"HTTP/1.1 200", b"HTTP/1.1 200 OK\r\nA: b\r\n", CONTINUE], ids=repr
)
def test_a_close_after_any_byte_of_a_head_is_protocol(data: bytes) -> None:
    with pytest.raises(BadResponse, match=f"after {len(data)} bytes, inside the response head"):
        head_of(data)


@pytest.mark.parametrize(
    "data", [b"SSH-2.0-OpenSSH\r\n", b"\x16\x03\x01\x02\x00", b"hello", b"HTTP/2 200", b"\r\n"]
)
def test_bytes_that_cannot_begin_a_status_line_are_refused_at_once(data: bytes) -> None:
    parser = HeadParser(16_384)
    parser.receive_data(data)  # no line end, no EOF: nothing to wait for
    with pytest.raises(BadResponse, match=r"not an HTTP/1\.x status line"):
        parser.next_head()


def test_garbage_after_an_interim_head_is_refused_at_once() -> None:
    parser = HeadParser(16_384)
    parser.receive_data(CONTINUE + b"garbage")
    with pytest.raises(BadResponse, match=r"not an HTTP/1\.x status line: b'garbage'"):
        parser.next_head()


# ---- content coding ----------------------------------------------------------------------------


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "identity, gzip", "x-unknown"])
def test_a_content_coding_is_a_protocol_error(coding: str) -> None:
    head = ResponseHead(200, "OK", (("Content-Encoding", coding), ("Content-Length", "3")))
    with pytest.raises(BadResponse, match="unsupported Content-Encoding"):
        body_decoder(head, None)


@pytest.mark.parametrize("coding", ["identity", "Identity", ""])
def test_identity_is_no_coding(coding: str) -> None:
    head = ResponseHead(200, "OK", (("Content-Encoding", coding), ("Content-Length", "2")))
    decoder = body_decoder(head, None)
    assert decoder.feed(b"ok") == b"ok"


# ---- the caps on one completion ----------------------------------------------------------------

SMALL = CompletionLimits(
    content_bytes=10, reasoning_bytes=10, tool_calls=2, tool_call_bytes=20, tokens=5
)


def fold(chunks: list[dict[str, Any]], limits: CompletionLimits = SMALL) -> Assembler:
    asm = Assembler(limits)
    for c in chunks:
        asm.feed(orjson.dumps(c))
    return asm


def tool(index: int, args: str, *, id: str | None = None, name: str | None = None) -> Any:
    fn: dict[str, Any] = {"arguments": args}
    if name is not None:
        fn["name"] = name
    return {"index": index, "id": id, "function": fn}


def test_content_up_to_the_cap_is_kept_and_one_byte_more_is_refused() -> None:
    asm = fold([chunk_obj(content="é" * 5), chunk_obj(finish="stop", predicted=1)])
    assert asm.completion().content == "é" * 5  # 10 bytes of UTF-8
    with pytest.raises(BadResponse, match=r"content would reach 11 bytes, over max_content_bytes"):
        fold([chunk_obj(content="é" * 5), chunk_obj(content="x")])


def test_reasoning_cap_names_its_key() -> None:
    with pytest.raises(BadResponse, match="max_reasoning_bytes = 10"):
        fold([chunk_obj(reasoning="a" * 6), chunk_obj(reasoning="b" * 5)])


def test_a_tool_call_past_max_tool_calls_is_refused() -> None:
    calls = [chunk_obj(tool_calls=[tool(i, "", id=f"c{i}", name="f")]) for i in range(2)]
    fold(calls)
    with pytest.raises(BadResponse, match=r"more than 2 tool calls \(max_tool_calls\)"):
        fold([*calls, chunk_obj(tool_calls=[tool(7, "")])])


def test_tool_call_bytes_count_ids_names_and_arguments() -> None:
    first = chunk_obj(tool_calls=[tool(0, "{}", id="abcd", name="name")])  # 10 bytes
    fold([first, chunk_obj(tool_calls=[tool(0, "x" * 10)])])  # 20: at the cap
    with pytest.raises(BadResponse, match="max_tool_call_bytes"):
        fold([first, chunk_obj(tool_calls=[tool(0, "x" * 11)])])


def test_generated_tokens_past_max_tokens_are_refused() -> None:
    fold([chunk_obj(content="a", predicted=5)])
    with pytest.raises(BadResponse, match="generated 6 tokens, past max_tokens = 5"):
        fold([chunk_obj(content="a", predicted=5), chunk_obj(predicted=6)])


def test_delta_chunks_without_timings_count_one_token_each() -> None:
    fold([chunk_obj(content="a")] * 5)
    with pytest.raises(BadResponse, match="past max_tokens"):
        fold([chunk_obj(content="")] * 6)


def test_predicted_n_that_goes_back_and_forth_still_adds_up() -> None:
    with pytest.raises(BadResponse, match="past max_tokens"):
        fold([chunk_obj(predicted=n) for n in (4, 0, 4)])


def test_caps_at_their_defaults_hold_a_real_completion() -> None:
    asm = Assembler()
    for c in [chunk_obj(content="x" * 1000, predicted=n) for n in range(1, 100)]:
        asm.feed(orjson.dumps(c))
    asm.feed(orjson.dumps(chunk_obj(finish="stop", predicted=100)))
    assert len(asm.completion().content or "") == 99_000


# ---- progress, for liveness --------------------------------------------------------------------


def progress_of(*chunks: dict[str, Any]) -> list[int]:
    asm = Assembler()
    out = []
    for c in chunks:
        asm.feed(orjson.dumps(c))
        out.append(asm.progress)
    return out


def test_what_moves_the_completion_on_is_progress() -> None:
    counts = progress_of(
        chunk_obj(progress=(100, 0, 10)),
        chunk_obj(progress=(100, 0, 60)),
        chunk_obj(content="a", predicted=1),
        chunk_obj(reasoning="b"),
        chunk_obj(tool_calls=[tool(0, "", id="i", name="f")]),
        chunk_obj(tool_calls=[tool(0, "{")]),
        chunk_obj(finish="stop"),
    )
    assert all(b > a for a, b in zip([0, *counts], counts, strict=False))


def test_what_repeats_or_carries_nothing_is_not_progress() -> None:
    first = chunk_obj(progress=(100, 0, 10), content="a", predicted=1)
    counts = progress_of(
        first,
        chunk_obj(progress=(100, 0, 10)),  # the same progress again
        chunk_obj(content="", predicted=1),  # an empty delta, no new token
        chunk_obj(),  # nothing at all
        {"id": "x"},
    )
    assert len(set(counts)) == 1


def test_more_prompt_processed_than_its_total_is_refused() -> None:
    with pytest.raises(BadResponse, match="11 of 10 prompt tokens processed"):
        progress_of(chunk_obj(progress=(10, 0, 11)))


# ---- the request side of max_tokens ------------------------------------------------------------


def test_extra_may_lower_max_tokens_but_not_raise_it(tmp_path: Any) -> None:
    config = make_config(tmp_path / "s.sock", max_tokens=100)
    req = ChatRequest(0, (UserMessage("hi"),))
    assert b'"max_tokens":40' in chat_body(req, config, {"max_tokens": 40})
    for bad in (101, 0, True, "5", 2**64):
        with pytest.raises(ValueError, match="extra max_tokens must be an integer from 1 to"):
            chat_body(req, config, {"max_tokens": bad})
