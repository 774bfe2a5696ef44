"""Differential tests: the two SSELineSplitter twins on random input, cut at random places.

For every stream and every set of cut points:
(1) the py twin and the c twin give the same payloads from each feed, or raise the same
    (type, message) at the same feed;
(2) each twin gives the same payloads fed whole, at the cuts and byte by byte, or raises the same
    error each way; and the only error is SSEError.
Well-formed streams are also checked against the payloads and errors their builder predicts.
"""

from dataclasses import dataclass

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from boxmaker._fast import _sse_c, _sse_py
from boxmaker.proto.errors import SSEError
from tests.support.feed import pieces_at

Splitter = type[_sse_py.SSELineSplitter] | type[_sse_c.SSELineSplitter]
TWINS: dict[str, Splitter] = {"py": _sse_py.SSELineSplitter, "c": _sse_c.SSELineSplitter}
BOM = b"\xef\xbb\xbf"
MIB = 1_048_576

# The error, if any, as a comparable value: (type, message).
Failure = tuple[type[BaseException], str] | None


@dataclass
class Run:
    per_feed: list[list[bytes]]  # the payloads returned by each feed before any error
    failure: Failure

    @property
    def payloads(self) -> list[bytes]:
        return [p for batch in self.per_feed for p in batch]


def run(cls: Splitter, cap: int, pieces: list[bytes]) -> Run:
    splitter = cls(cap)
    per_feed: list[list[bytes]] = []
    for piece in pieces:
        try:
            per_feed.append(splitter.feed(piece))
        except Exception as exc:  # any error is compared here; check_twins wants SSEError only
            return Run(per_feed, (type(exc), str(exc)))
    return Run(per_feed, None)


def check_twins(stream: bytes, cap: int, cuts: list[int]) -> dict[str, Run]:
    """Asserts (1) and (2) for one stream; returns each twin's run fed whole."""
    ways: dict[str, list[bytes]] = {
        "whole": [stream],
        "cuts": pieces_at(stream, cuts),
        "bytewise": [stream[i : i + 1] for i in range(len(stream))],
    }
    runs = {
        (twin, way): run(cls, cap, pieces)
        for twin, cls in TWINS.items()
        for way, pieces in ways.items()
    }
    for way in ways:
        assert runs["py", way] == runs["c", way], f"the twins differ when fed {way}"
    for twin in TWINS:
        whole = runs[twin, "whole"]
        for way in ways:
            other = runs[twin, way]
            assert other.failure == whole.failure, f"{twin}: the error depends on the cuts ({way})"
            if whole.failure is None:
                assert other.payloads == whole.payloads, (
                    f"{twin}: payloads depend on the cuts ({way})"
                )
        if whole.failure is not None:
            assert whole.failure[0] is SSEError, whole.failure
    return {twin: runs[twin, "whole"] for twin in TWINS}


# Caps: mostly small, so that the refusal path is as common as the happy one.
caps = st.one_of(st.integers(1, 24), st.just(MIB))


def cut_points(data: st.DataObject, stream: bytes) -> list[int]:
    """Cut points anywhere, and often just around a CR or LF, where cuts matter most."""
    near_ends = sorted(
        {i + d for i, b in enumerate(stream) if b in b"\r\n" for d in (0, 1, 2)}
        & set(range(len(stream) + 1))
    )
    anywhere = st.integers(0, len(stream))
    points = st.one_of(anywhere, st.sampled_from(near_ends)) if near_ends else anywhere
    return data.draw(st.lists(points, max_size=12), label="cuts")


# --- (a) random bytes, biased toward the bytes the splitter cares about -------------------------

# Random lines: a start, some bytes, an end; each part biased toward the bytes that matter.
line_starts = st.sampled_from(
    [b"", b"data:", b"data: ", b"data", b"data:  ", b":", b": ping", b"event: x", b"id", b"datum:",
     BOM, b"\xef\xbb", b"\xef"]
)  # fmt: skip
line_middles = st.one_of(
    st.sampled_from([b"", b"x", b" ", b"[DONE]", b"hello", b":", b"\r", b"\n", BOM]),
    st.binary(max_size=6),
)
line_ends = st.sampled_from([b"\n", b"\r\n", b"\r", b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r", b""])
random_lines = st.lists(st.tuples(line_starts, line_middles, line_ends), max_size=20)
random_streams = st.one_of(
    random_lines.map(lambda lines: b"".join(b"".join(parts) for parts in lines)),
    st.binary(max_size=64),
)


@settings(max_examples=300, deadline=None)
@given(stream=random_streams, cap=caps, data=st.data())
def test_random_streams_agree(stream: bytes, cap: int, data: st.DataObject) -> None:
    cuts = cut_points(data, stream)
    note(f"check_twins({stream!r}, cap={cap}, cuts={sorted(set(cuts))})")
    check_twins(stream, cap, cuts)


# Streams, caps and cuts worth keeping whatever Hypothesis happens to draw.
PINNED: list[tuple[str, bytes, int, list[int]]] = [
    ("cr_ends_the_stream", b"data: a\r", MIB, [7]),
    ("lf_after_cr_and_one_byte", b"data: a\rx\ndata: b\n\n", MIB, [9]),
    ("bom_start_turns_into_a_line", b"\xef\xbb\n", 1, [1, 2]),
    ("bom_not_counted", BOM + b"x" * 5 + b"\n", 5, [2, 5]),
    ("cap_crossed_in_the_second_feed", b"data: 123\n", 8, [6]),
]


@pytest.mark.parametrize(
    ("stream", "cap", "cuts"), [p[1:] for p in PINNED], ids=[p[0] for p in PINNED]
)
def test_pinned_streams_agree(stream: bytes, cap: int, cuts: list[int]) -> None:
    check_twins(stream, cap, cuts)


# --- (b) well-formed streams, with the payloads and errors they must give -----------------------

# A value or comment: any bytes but the line ends.
line_text = st.one_of(
    st.binary(max_size=12),
    st.text(max_size=8).map(str.encode),
    st.sampled_from([b"", b" ", b"  x"]),
).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
wire_ends = st.sampled_from([b"\n", b"\r\n", b"\r"])


@dataclass
class Line:
    """One line as it goes on the wire, and the data value it adds (None: not a data line)."""

    text: bytes
    value: bytes | None


@st.composite
def data_lines(draw: st.DrawFn) -> Line:
    value = draw(line_text)
    form = draw(st.sampled_from(["space", "no_space", "bare"]))
    if form == "bare":
        return Line(b"data", b"")
    if form == "space":
        return Line(b"data: " + value, value)
    return Line(b"data:" + value, value[1:] if value.startswith(b" ") else value)


@st.composite
def other_lines(draw: st.DrawFn) -> Line:
    value = draw(line_text)
    name = draw(st.sampled_from([b"", b"event", b"id", b"retry", b"datum", b"data ", b"DATA"]))
    if name == b"":
        return Line(b":" + value, None)  # a comment
    colon = draw(st.sampled_from([b":", b": "]))
    return Line(name + colon + value, None)


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[bytes, list[bytes], int]:
    """A well-formed stream; returns it, its payloads, and its longest line (BOM excluded)."""
    events = draw(
        st.lists(st.lists(st.one_of(data_lines(), other_lines()), max_size=4), max_size=6)
    )
    tail = draw(st.lists(st.one_of(data_lines(), other_lines()), max_size=2))  # never dispatched
    unended = draw(st.one_of(st.just(b""), line_text))  # a last line with no end yet

    lines: list[bytes] = []
    expected: list[bytes] = []
    for event in events:
        lines += [line.text for line in event]
        lines.append(b"")  # the blank line that dispatches it
        values = [line.value for line in event if line.value is not None]
        if values:
            expected.append(b"\n".join(values))
    lines += [line.text for line in tail]

    out = bytearray(BOM if draw(st.booleans()) else b"")
    previous_end = b""
    for line in lines:
        end = draw(wire_ends)
        if previous_end == b"\r" and line == b"" and end == b"\n":
            end = b"\r\n"  # a lone LF after a lone CR would join it as one CRLF
        out += line + end
        previous_end = end
    out += unended
    longest = max([len(line) for line in lines] + [len(unended)])
    return bytes(out), expected, longest


@settings(max_examples=300, deadline=None)
@given(built=sse_streams(), cap=caps, data=st.data())
def test_well_formed_streams_give_their_payloads(
    built: tuple[bytes, list[bytes], int], cap: int, data: st.DataObject
) -> None:
    stream, expected, longest = built
    cuts = cut_points(data, stream)
    note(f"check_twins({stream!r}, cap={cap}, cuts={sorted(set(cuts))})")
    note(f"expected={expected!r} longest_line={longest}")
    runs = check_twins(stream, cap, cuts)
    for twin, result in runs.items():
        if longest > cap:
            assert result.failure == (SSEError, f"SSE line longer than {cap} bytes"), twin
        else:
            assert result.failure is None, twin
            assert result.payloads == expected, twin
