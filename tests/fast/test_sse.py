"""Hand-written cases for SSELineSplitter, run on both twins (`sse_cls`) and fed three ways.

Each stream is fed whole, byte by byte and in thirds (tests/support/feed.py), and must give the
same payloads every way: where a feed is cut must never change what comes out.
"""

import orjson
import pytest

from boxmaker._fast import IMPLEMENTATIONS, NO_EXTENSIONS, _sse_c, _sse_py, sse
from boxmaker.proto.errors import ProtocolError, SSEError
from tests.support.feed import FEED_MODES, feed_pieces

Splitter = type[_sse_py.SSELineSplitter] | type[_sse_c.SSELineSplitter]
MIB = 1_048_576
BOM = b"\xef\xbb\xbf"


@pytest.fixture(params=list(FEED_MODES))
def sse_feed_mode(request: pytest.FixtureRequest) -> str:
    mode: str = request.param
    return mode


def payloads(
    cls: Splitter, data: bytes, mode: str, max_line_bytes: int = MIB, max_event_bytes: int = 4 * MIB
) -> list[bytes]:
    """Feeds `data` one way; returns every payload that came out, checking each is bytes."""
    splitter = cls(max_line_bytes, max_event_bytes=max_event_bytes)
    out = [p for batch in FEED_MODES[mode](splitter.feed, data) for p in batch]
    assert all(type(p) is bytes for p in out), out
    return out


def pieces_payloads(cls: Splitter, pieces: list[bytes]) -> list[bytes]:
    splitter = cls()
    return [p for batch in feed_pieces(splitter.feed, pieces) for p in batch]


# (id, stream, payloads): each runs on both twins in every feed mode.
CASES: list[tuple[str, bytes, list[bytes]]] = [
    # Line ends: LF, CRLF, lone CR, and mixes of them.
    ("lf", b"data: a\n\ndata: b\n\n", [b"a", b"b"]),
    ("crlf", b"data: a\r\n\r\ndata: b\r\n\r\n", [b"a", b"b"]),
    ("cr", b"data: a\r\rdata: b\r\r", [b"a", b"b"]),
    ("cr_then_crlf_blank", b"data: a\r\r\ndata: b\n\n", [b"a", b"b"]),
    ("lf_then_cr_blank", b"data: a\n\rdata: b\r\n\n", [b"a", b"b"]),
    ("crlf_is_one_line_end", b"data: a\r\ndata: b\r\n\r\n", [b"a\nb"]),
    ("lfcr_is_two_line_ends", b"data: a\n\r", [b"a"]),
    # Comments and fields other than data.
    ("comments", b": ping\ndata: a\n: another\n\n", [b"a"]),
    ("comment_only_event", b":\n\n: keep-alive\n\n", []),
    (
        "other_fields",
        b"event: message\nid: 7\nretry: 100\nfoo: bar\ndata: a\nevent\n\n",
        [b"a"],
    ),
    ("event_without_data", b"event: x\nid: 1\n\n", []),
    ("near_miss_field_names", b"datum: x\ndata : y\nDATA: z\ndat: w\n dat: v\n\n", []),
    # Data values.
    ("multi_line_data", b"data: a\ndata: b\ndata: c\n\n", [b"a\nb\nc"]),
    ("multi_line_with_empty", b"data: a\ndata:\ndata: c\n\n", [b"a\n\nc"]),
    ("no_space", b"data:a\n\n", [b"a"]),
    ("second_space_kept", b"data:  a\n\n", [b" a"]),
    ("trailing_space_kept", b"data: a b \n\n", [b"a b "]),
    ("tab_kept", b"data:\ta\n\n", [b"\ta"]),
    ("colons_in_value", b'data: {"a":1}\ndata::x\n\n', [b'{"a":1}\n:x']),
    ("bare_data", b"data\n\n", [b""]),
    ("bare_data_twice", b"data\ndata\n\n", [b"\n"]),
    ("bare_data_then_value", b"data\ndata: a\n\n", [b"\na"]),
    ("empty_data", b"data:\n\n", [b""]),
    ("space_only_data", b"data: \n\n", [b""]),
    ("non_ascii_value", "data: héllo ✓\n\n".encode(), ["héllo ✓".encode()]),
    # Dispatch.
    ("blank_lines_only", b"\n\n\r\n\r\r", []),
    ("blank_lines_between", b"data: a\n\n\n\n\ndata: b\n\n", [b"a", b"b"]),
    ("incomplete_event_dropped", b"data: a\n\ndata: b\n", [b"a"]),
    ("incomplete_line_dropped", b"data: a\n\ndata: b", [b"a"]),
    ("done", b"data: [DONE]\n\n", [b"[DONE]"]),
    ("done_is_just_a_payload", b"data: [DONE]\n\ndata: after\n\n", [b"[DONE]", b"after"]),
    # The byte order mark: skipped once, at the very start only.
    ("bom", BOM + b"data: a\n\n", [b"a"]),
    ("bom_then_blank", BOM + b"\ndata: a\n\n", [b"a"]),
    ("bom_alone", BOM, []),
    ("second_bom_is_line_content", BOM + BOM + b"data: a\n\ndata: b\n\n", [b"b"]),
    ("bom_after_start_is_line_content", b"data: a\n\n" + BOM + b"data: b\n\n", [b"a"]),
    ("bom_in_value_kept", b"data: " + BOM + b"x\n\n", [BOM + b"x"]),
    ("bom_start_then_not", b"\xefdata: a\n\ndata: b\n\n", [b"b"]),
    ("bom_two_thirds_then_not", b"\xef\xbbdata: a\n\ndata: b\n\n", [b"b"]),
    ("bom_prefix_then_blank", b"\xef\xbb\ndata: a\n\n", [b"a"]),
]


@pytest.mark.parametrize(("stream", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_stream_gives_payloads(
    sse_cls: Splitter, sse_feed_mode: str, stream: bytes, expected: list[bytes]
) -> None:
    assert payloads(sse_cls, stream, sse_feed_mode) == expected


# (id, pieces, payloads): cut at the exact places a CR is tricky.
PIECES: list[tuple[str, list[bytes], list[bytes]]] = [
    # The LF after a CR that ended a feed is the rest of a CRLF, not a blank line.
    ("crlf_split", [b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], [b"a\nb"]),
    ("crlf_split_by_empty_feed", [b"data: a\r", b"", b"", b"\ndata: b\n\n"], [b"a\nb"]),
    # A lone CR at the end of a feed ends its line at once; what follows is not skipped.
    ("cr_then_cr", [b"data: a\r", b"\r"], [b"a"]),
    ("cr_then_data", [b"data: a\r", b"data: b\r", b"\r"], [b"a\nb"]),
    ("cr_then_blank_lf", [b"data: a\r", b"\n", b"\n"], [b"a"]),
    # Only one LF is skipped, and only right after the CR.
    ("cr_then_two_lf", [b"data: a\r", b"\n\n"], [b"a"]),
    ("cr_then_x_then_lf", [b"data: a\r", b"data: b", b"\n\n"], [b"a\nb"]),
    ("cr_x_then_lf", [b"data: a\rx", b"\ndata: b\n\n"], [b"a\nb"]),
    ("cr_lf_x_then_lf", [b"data: a\r\ndata: b", b"\n\n"], [b"a\nb"]),
    # A line cut anywhere, including inside `data:`.
    ("field_name_cut", [b"da", b"ta", b":", b" x\n", b"\n"], [b"x"]),
    ("bom_bytewise", [b"\xef", b"\xbb", b"\xbf", b"data: a\n\n"], [b"a"]),
    ("bom_cut_with_empty_feeds", [b"", b"\xef\xbb", b"", b"\xbfdata: a\n\n"], [b"a"]),
]


@pytest.mark.parametrize(
    ("pieces", "expected"), [c[1:] for c in PIECES], ids=[c[0] for c in PIECES]
)
def test_pieces_give_payloads(
    sse_cls: Splitter, pieces: list[bytes], expected: list[bytes]
) -> None:
    assert pieces_payloads(sse_cls, pieces) == expected


def test_payload_comes_out_of_the_feed_that_completes_it(sse_cls: Splitter) -> None:
    splitter = sse_cls()
    assert splitter.feed(b"data: a\n") == []
    assert splitter.feed(b"\ndata: b\n\ndata: c\n") == [b"a", b"b"]
    assert splitter.feed(b"") == []
    assert splitter.feed(b"\n") == [b"c"]


def llama_chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    """One chat.completion.chunk as llama-server streams it (timings_per_token on)."""
    return {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 1_717_000_000,
        "id": "chatcmpl-3bTq0k7JbZlGn1x2",
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "system_fingerprint": "b11434-0c0ffee",
        "object": "chat.completion.chunk",
        "timings": {"prompt_n": 12, "prompt_ms": 8.5, "predicted_n": 3, "predicted_ms": 21.25},
    }


def test_llama_server_stream(sse_cls: Splitter, sse_feed_mode: str) -> None:
    chunks = [llama_chunk({"role": "assistant", "content": None})]
    chunks += [llama_chunk({"content": word}) for word in ["Hi", " there", "! ✓", "\n"]]
    chunks.append(llama_chunk({}, finish="stop"))
    stream = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    out = payloads(sse_cls, stream, sse_feed_mode)

    assert out[-1] == b"[DONE]"
    assert [orjson.loads(p) for p in out[:-1]] == chunks


# --- the line cap -------------------------------------------------------------------------------


def line_of(n: int) -> bytes:
    """A data line of exactly n bytes (n >= 6), without its line end."""
    return b"data: " + b"x" * (n - 6)


@pytest.mark.parametrize("mode", ["whole", "thirds"])  # a 1 MiB line byte by byte is too slow
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_line_of_exactly_the_default_cap_is_accepted(
    sse_cls: Splitter, mode: str, end: bytes
) -> None:
    assert sse_cls().max_line_bytes == MIB
    assert payloads(sse_cls, line_of(MIB) + end + end, mode) == [b"x" * (MIB - 6)]


@pytest.mark.parametrize("mode", ["whole", "thirds"])
@pytest.mark.parametrize("tail", [b"\n\n", b""], ids=["ended", "unended"])
def test_line_one_over_the_default_cap_raises(sse_cls: Splitter, mode: str, tail: bytes) -> None:
    with pytest.raises(SSEError, match=r"^SSE line longer than 1048576 bytes$"):
        payloads(sse_cls, b"data: a\n\n" + line_of(MIB + 1) + tail, mode)


def test_default_cap_is_one_mib_in_both_twins() -> None:
    assert _sse_py.DEFAULT_MAX_LINE_BYTES == _sse_c.DEFAULT_MAX_LINE_BYTES == MIB


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (line_of(8) + b"\n\n", [b"xx"]),
        (b"data:123\n\n", [b"123"]),
        (b": 345678\n\n", []),  # comment lines count as well
        (BOM + line_of(8) + b"\r\n\r\n", [b"xx"]),  # the BOM is not part of the line
        (line_of(8), []),  # an unfinished line at the cap is held, not refused
    ],
)
def test_small_cap_accepts_lines_up_to_it(
    sse_cls: Splitter, sse_feed_mode: str, stream: bytes, expected: list[bytes]
) -> None:
    assert payloads(sse_cls, stream, sse_feed_mode, max_line_bytes=8) == expected


@pytest.mark.parametrize(
    "stream",
    [
        line_of(9) + b"\n\n",
        b"data: ok\n\n" + line_of(9),  # unfinished, at the end of the stream
        b": 3456789\n",
        b"event: 89\n",
        b"\xef\xbbdata: a\n",  # a BOM start that is not a BOM is line content
        b"data: \r\n\r\n123456789\r",
    ],
)
def test_small_cap_refuses_one_byte_more(
    sse_cls: Splitter, sse_feed_mode: str, stream: bytes
) -> None:
    with pytest.raises(SSEError, match=r"^SSE line longer than 8 bytes$"):
        payloads(sse_cls, stream, sse_feed_mode, max_line_bytes=8)


@pytest.mark.parametrize(("cap", "size"), [(1000, 7), (MIB, 16_384)])
def test_long_line_in_small_feeds_raises_without_growing_past_the_cap(
    sse_cls: Splitter, cap: int, size: int
) -> None:
    splitter = sse_cls(cap)
    held = []
    with pytest.raises(SSEError, match=rf"^SSE line longer than {cap} bytes$"):  # noqa: PT012
        for _ in range(cap // size + 10):
            splitter.feed(b"x" * size)
            held.append(splitter.pending_bytes)
    # Every feed that fit was held in full; the one that crossed the cap raised.
    assert held == [size * (k + 1) for k in range(cap // size)]
    assert max(held) <= cap
    assert splitter.pending_bytes == 0  # the error let go of the held bytes


def test_huge_feed_raises_without_buffering_it(sse_cls: Splitter) -> None:
    splitter = sse_cls()
    with pytest.raises(SSEError, match=r"^SSE line longer than 1048576 bytes$"):
        splitter.feed(b"data: " + b"y" * (3 * MIB))
    assert splitter.pending_bytes == 0


@pytest.mark.parametrize(
    ("first", "message"),
    [
        (b"data: a\n" + line_of(20), "SSE line longer than 8 bytes"),
        (b"data:a\ndata:123\ndata:4\ndata", "SSE event longer than 6 bytes"),
    ],
    ids=["line", "event"],
)
def test_error_is_sticky(sse_cls: Splitter, first: bytes, message: str) -> None:
    splitter = sse_cls(8, max_event_bytes=6)
    with pytest.raises(SSEError, match=rf"^{message}$"):
        splitter.feed(first)
    # The half-read event and line are gone; the splitter refuses everything after.
    for later in [b"\n\ndata: b\n\n", b""]:
        with pytest.raises(SSEError, match=rf"^{message}$"):
            splitter.feed(later)
    assert splitter.pending_bytes == 0
    assert splitter.event_bytes == 0


def test_sse_error_is_a_protocol_error() -> None:
    assert issubclass(SSEError, ProtocolError)


@pytest.mark.parametrize("name", ["max_line_bytes", "max_event_bytes"])
@pytest.mark.parametrize(
    ("cap", "error", "message"),
    [
        (0, ValueError, r"must be between 1 and 9223372036854775807, got 0$"),
        (-5, ValueError, r"must be between 1 and 9223372036854775807, got -5$"),
        (2**63, ValueError, r"must be between 1 and 9223372036854775807, got 9223372036854775808$"),
        (1.5, TypeError, r"must be an int, got float$"),
        ("10", TypeError, r"must be an int, got str$"),
        (True, TypeError, r"must be an int, got bool$"),
    ],
)
def test_bad_cap_is_refused(
    sse_cls: Splitter, name: str, cap: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{name} {message}"):
        sse_cls(**{name: cap})  # type: ignore[arg-type]


def test_max_event_bytes_is_keyword_only(sse_cls: Splitter) -> None:
    # Two int caps side by side are too easy to swap.
    with pytest.raises(TypeError, match="positional argument"):
        sse_cls(8, 16)  # type: ignore[call-arg]
    splitter = sse_cls(8, max_event_bytes=16)
    assert (splitter.max_line_bytes, splitter.max_event_bytes) == (8, 16)


@pytest.mark.parametrize(
    ("data", "name"),
    [(bytearray(b"data: a\n\n"), "bytearray"), ("data: a\n\n", "str"), (None, "NoneType")],
)
def test_feed_wants_bytes(sse_cls: Splitter, data: object, name: str) -> None:
    with pytest.raises(TypeError, match=rf"^feed\(\) wants bytes, got {name}$"):
        sse_cls().feed(data)  # type: ignore[arg-type]


# --- the event cap ------------------------------------------------------------------------------

# Small enough that every feed mode is quick; the payload counts data values and joining LFs only.
EVENT_CAP = 12

# (id, stream, payloads): each has an event of exactly EVENT_CAP bytes, and must be accepted.
EVENT_AT_CAP: list[tuple[str, bytes, list[bytes]]] = [
    ("one_line", b"data: 123456789012\n\n", [b"123456789012"]),
    ("lines_and_lfs", b"data: 1234\ndata: 56\ndata: 7890\n\n", [b"1234\n56\n7890"]),
    ("bare_data_lines", b"data\n" * 13 + b"\n", [b"\n" * 12]),
    (
        "other_lines_not_counted",
        b"data: 12345\n: a long comment\nevent: x\nid: 1\ndata:123456\n\n",
        [b"12345\n123456"],
    ),
    ("crlf_and_space_not_counted", b"data:  12345\r\ndata: 12345\r\n\r\n", [b" 12345\n12345"]),
    ("bom_not_counted", BOM + b"data: 123456789012\r\r", [b"123456789012"]),
    (
        "reset_after_dispatch",
        b"data: 123456\ndata: 89012\n\ndata: abcdef\ndata: hijkl\n\n",
        [b"123456\n89012", b"abcdef\nhijkl"],
    ),
    ("unfinished_line_not_counted_yet", b"data: 123456\ndata: 8901234567", []),
]


@pytest.mark.parametrize(
    ("stream", "expected"), [c[1:] for c in EVENT_AT_CAP], ids=[c[0] for c in EVENT_AT_CAP]
)
def test_event_of_exactly_the_cap_is_accepted(
    sse_cls: Splitter, sse_feed_mode: str, stream: bytes, expected: list[bytes]
) -> None:
    out = payloads(sse_cls, stream, sse_feed_mode, max_event_bytes=EVENT_CAP)
    assert out == expected
    assert max(map(len, out), default=EVENT_CAP) == EVENT_CAP


# (id, stream): each has an event of EVENT_CAP + 1 bytes, refused when its last data line ends.
EVENT_OVER_CAP: list[tuple[str, bytes]] = [
    ("one_line", b"data: 1234567890123\n\n"),
    ("lines_and_lfs", b"data: 1234\ndata: 56\ndata: 78901\n\n"),
    ("bare_data_lines", b"data\n" * 14 + b"\n"),
    ("lf_tips_it_over", b"data: 123456789012\ndata\n\n"),
    ("other_lines_not_counted", b"data: 12345\n: comment\nid: 1\ndata:1234567\n\n"),
    ("no_blank_line_needed", b"data: 123456\ndata: 890123\n"),
    ("cr_ends_the_line_at_once", b"data: 123456\rdata: 890123\r"),
    ("second_event", b"data: 123456789012\n\ndata: 123456\ndata: 890123\n\n"),
]


@pytest.mark.parametrize(
    "stream", [c[1] for c in EVENT_OVER_CAP], ids=[c[0] for c in EVENT_OVER_CAP]
)
def test_event_one_byte_over_the_cap_raises(
    sse_cls: Splitter, sse_feed_mode: str, stream: bytes
) -> None:
    with pytest.raises(SSEError, match=rf"^SSE event longer than {EVENT_CAP} bytes$"):
        payloads(sse_cls, stream, sse_feed_mode, max_event_bytes=EVENT_CAP)


def test_event_error_comes_out_of_the_feed_that_ends_the_line(sse_cls: Splitter) -> None:
    splitter = sse_cls(max_event_bytes=EVENT_CAP)
    assert splitter.feed(b"data: 1234\n\ndata: 123456\ndata: 890") == [b"1234"]
    assert splitter.feed(b"123") == []  # the line that will break the cap is not complete yet
    with pytest.raises(SSEError, match=rf"^SSE event longer than {EVENT_CAP} bytes$"):
        splitter.feed(b"\n\n")


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (line_of(9) + b"\n", "SSE line longer than 8 bytes"),  # over both: the line cap first
        (line_of(8) + b"\n", "SSE event longer than 1 bytes"),
        (b"data\ndata\ndata\n", "SSE event longer than 1 bytes"),
    ],
)
def test_line_cap_is_checked_before_the_event_cap(
    sse_cls: Splitter, sse_feed_mode: str, stream: bytes, message: str
) -> None:
    with pytest.raises(SSEError, match=rf"^{message}$"):
        payloads(sse_cls, stream, sse_feed_mode, max_line_bytes=8, max_event_bytes=1)


def test_event_bytes_reports_the_payload_so_far(sse_cls: Splitter) -> None:
    splitter = sse_cls()
    seen = []
    for piece in [b"data: ab", b"c\n", b"data\n", b": x\n", b"data: de\n", b"\n", b"data:\n"]:
        splitter.feed(piece)
        seen.append((splitter.pending_bytes, splitter.event_bytes))
    # "abc", then "abc\n", then "abc\n\nde"; the blank line dispatches; then "" (one data line).
    assert seen == [(8, 0), (0, 3), (0, 4), (0, 4), (0, 7), (0, 0), (0, 0)]


@pytest.mark.parametrize(
    ("cap", "line"),
    [(1000, b"data: x\n"), (4 * MIB, b"data: " + b"y" * (16_384 - 7) + b"\n")],
    ids=["small_cap_tiny_lines", "default_cap_16k_lines"],
)
def test_many_data_lines_in_small_feeds_raise_without_growing_past_the_cap(
    sse_cls: Splitter, cap: int, line: bytes
) -> None:
    """A peer that sends data lines and never a blank line: one line per feed, as it trickles in."""
    splitter = sse_cls(max_event_bytes=cap)
    value = len(line) - 7  # without "data: " and the LF
    held = []
    with pytest.raises(SSEError, match=rf"^SSE event longer than {cap} bytes$"):  # noqa: PT012
        for _ in range(cap // value + 10):
            assert splitter.feed(line) == []
            held.append(splitter.event_bytes)
    # Every line that fit was held; the one that would take the payload past the cap raised.
    fits = (cap + 1) // (value + 1)  # k values and k - 1 LFs fit while k * (value + 1) - 1 <= cap
    assert held == [k * (value + 1) - 1 for k in range(1, fits + 1)]
    assert max(held) <= cap
    assert (splitter.event_bytes, splitter.pending_bytes) == (0, 0)  # the error let go of them


def default_cap_event(size: int) -> bytes:
    """An event whose payload is `size` bytes, in data lines that each fit the 1 MiB line cap."""
    values = []
    while size > 0:
        take = min(MIB - 6, size)
        values.append(b"z" * take)
        size -= take + 1  # the LF before the next value
    if size == 0:
        values.append(b"")  # the last LF was the whole remainder: an empty last value
    return b"".join(b"data: " + v + b"\n" for v in values) + b"\n"


@pytest.mark.parametrize("mode", ["whole", "thirds"])  # 4 MiB byte by byte is too slow
def test_default_event_cap_is_four_mib(sse_cls: Splitter, mode: str) -> None:
    assert _sse_py.DEFAULT_MAX_EVENT_BYTES == _sse_c.DEFAULT_MAX_EVENT_BYTES == 4 * MIB
    assert sse_cls().max_event_bytes == 4 * MIB
    feed = FEED_MODES[mode]
    out = feed(sse_cls().feed, default_cap_event(4 * MIB))  # built with no arguments: the default
    assert [len(p) for batch in out for p in batch] == [4 * MIB]
    with pytest.raises(SSEError, match=r"^SSE event longer than 4194304 bytes$"):
        feed(sse_cls().feed, default_cap_event(4 * MIB + 1))


# --- which twin the selector picked ---------------------------------------------------------------


def test_selector_uses_the_compiled_twin() -> None:
    """The daemons must run the compiled twin; only BOXMAKER_NO_EXTENSIONS may pick the other."""
    if NO_EXTENSIONS:
        assert sse.SSELineSplitter.__module__ == "boxmaker._fast._sse_py"
        assert IMPLEMENTATIONS["sse"] == "py"
    else:
        assert sse.SSELineSplitter.__module__ == "boxmaker._fast._sse_c"
        assert IMPLEMENTATIONS["sse"] == "c"
    assert sse.DEFAULT_MAX_LINE_BYTES == MIB
    assert sse.DEFAULT_MAX_EVENT_BYTES == 4 * MIB
