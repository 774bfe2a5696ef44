"""Differential tests: the two SSELineSplitter twins on random input, cut at random places.

For every stream, pair of caps (line and event) and set of cut points:
(1) the py twin and the c twin give the same payloads from each feed, report the same held bytes
    (pending_bytes, event_bytes) after it, or raise the same (type, message) at the same feed;
(2) each twin gives the same payloads fed whole, at the cuts and byte by byte, or raises the same
    error each way; and the only error is SSEError.
Well-formed streams are also checked against the payloads and errors their builder predicts.
The caps are small in most examples, so that both refusals come up often.
"""

from dataclasses import dataclass

import hypothesis
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
    held: list[tuple[int, int]]  # (pending_bytes, event_bytes) after each of those feeds
    failure: Failure

    @property
    def payloads(self) -> list[bytes]:
        return [p for batch in self.per_feed for p in batch]


def run(cls: Splitter, cap: int, event_cap: int, pieces: list[bytes]) -> Run:
    splitter = cls(cap, max_event_bytes=event_cap)
    per_feed: list[list[bytes]] = []
    held: list[tuple[int, int]] = []
    for piece in pieces:
        try:
            per_feed.append(splitter.feed(piece))
        except Exception as exc:  # any error is compared here; check_twins wants SSEError only
            assert (splitter.pending_bytes, splitter.event_bytes) == (0, 0), "kept after an error"
            return Run(per_feed, held, (type(exc), str(exc)))
        held.append((splitter.pending_bytes, splitter.event_bytes))
        assert splitter.pending_bytes <= cap, "line held past the line cap"
        assert splitter.event_bytes <= event_cap, "event held past the event cap"
    return Run(per_feed, held, None)


def check_twins(
    stream: bytes, cap: int, event_cap: int, cuts: list[int]
) -> dict[tuple[str, str], Run]:
    """Asserts (1) and (2) for one stream; returns every run, keyed by (twin, way)."""
    ways: dict[str, list[bytes]] = {
        "whole": [stream],
        "cuts": pieces_at(stream, cuts),
        "bytewise": [stream[i : i + 1] for i in range(len(stream))],
    }
    runs = {
        (twin, way): run(cls, cap, event_cap, pieces)
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
    return runs


def label(runs: dict[tuple[str, str], Run]) -> None:
    """Counts the outcomes (--hypothesis-show-statistics), to see that each kind is common."""
    failure = runs["py", "whole"].failure
    hypothesis.event("no error" if failure is None else failure[1].split(" than")[0])


# (line cap, event cap): mostly small, so that both refusals come up often.
small_line_caps = st.integers(1, 24)
small_event_caps = st.integers(1, 12)
caps = st.one_of(
    st.tuples(small_line_caps, st.just(4 * MIB)),
    st.tuples(st.just(MIB), small_event_caps),
    st.tuples(small_line_caps, small_event_caps),
    st.just((MIB, 4 * MIB)),
)


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
# Data lines with single line ends and no blank line: the events the event cap is for.
data_runs = st.lists(
    st.tuples(
        st.sampled_from([b"data:", b"data: ", b"data", b": ping"]),
        line_middles,
        st.sampled_from([b"\n", b"\r\n", b"\r"]),
    ),
    max_size=12,
)
random_streams = st.one_of(
    random_lines.map(lambda lines: b"".join(b"".join(parts) for parts in lines)),
    data_runs.map(lambda lines: b"".join(b"".join(parts) for parts in lines)),
    st.binary(max_size=64),
)


@settings(max_examples=300, deadline=None)
@given(stream=random_streams, both_caps=caps, data=st.data())
def test_random_streams_agree(
    stream: bytes, both_caps: tuple[int, int], data: st.DataObject
) -> None:
    cap, event_cap = both_caps
    cuts = cut_points(data, stream)
    note(f"check_twins({stream!r}, {cap}, {event_cap}, cuts={sorted(set(cuts))})")
    label(check_twins(stream, cap, event_cap, cuts))


# Streams, caps and cuts worth keeping whatever Hypothesis happens to draw.
PINNED: list[tuple[str, bytes, int, int, list[int]]] = [
    ("cr_ends_the_stream", b"data: a\r", MIB, 4 * MIB, [7]),
    ("lf_after_cr_and_one_byte", b"data: a\rx\ndata: b\n\n", MIB, 4 * MIB, [9]),
    ("bom_start_turns_into_a_line", b"\xef\xbb\n", 1, 4 * MIB, [1, 2]),
    ("bom_not_counted", BOM + b"x" * 5 + b"\n", 5, 4 * MIB, [2, 5]),
    ("cap_crossed_in_the_second_feed", b"data: 123\n", 8, 4 * MIB, [6]),
    # The event cap: the joining LF alone tips it over; the second value is cut across feeds.
    ("event_cap_lf_tips_it", b"data: ab\ndata\n\n", MIB, 2, [3, 9]),
    ("event_cap_value_cut", b"data: ab\ndata: cd\r\r", MIB, 4, [12, 14, 15]),
    ("event_cap_at_cap_then_reset", b"data: ab\ndata: c\n\ndata: abcd\n\n", MIB, 4, [10]),
    ("line_cap_before_event_cap", b"data: abc\n", 8, 1, [4]),
]


@pytest.mark.parametrize(
    ("stream", "cap", "event_cap", "cuts"), [p[1:] for p in PINNED], ids=[p[0] for p in PINNED]
)
def test_pinned_streams_agree(stream: bytes, cap: int, event_cap: int, cuts: list[int]) -> None:
    check_twins(stream, cap, event_cap, cuts)


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


@dataclass
class Built:
    """A well-formed stream and the lines it was built from (blank lines included, no BOM)."""

    stream: bytes
    lines: list[Line]
    unended: bytes  # a last line with no line end yet

    def expect(self, cap: int, event_cap: int) -> tuple[list[bytes], Failure]:
        """The payloads dispatched before any error, and the error, for these caps."""
        payloads: list[bytes] = []
        values: list[bytes] = []
        for line in self.lines:
            if len(line.text) > cap:
                return payloads, (SSEError, f"SSE line longer than {cap} bytes")
            if line.text == b"":
                if values:
                    payloads.append(b"\n".join(values))
                values = []
            elif line.value is not None:
                values.append(line.value)
                if len(b"\n".join(values)) > event_cap:
                    return payloads, (SSEError, f"SSE event longer than {event_cap} bytes")
        if len(self.unended) > cap:
            return payloads, (SSEError, f"SSE line longer than {cap} bytes")
        return payloads, None

    def largest_event(self) -> int:
        """The largest payload any event reaches, the undispatched tail included."""
        largest = size = 0
        values = 0  # data lines in the event so far
        for line in self.lines:
            if line.text == b"":
                size = values = 0
            elif line.value is not None:
                size += len(line.value) + (values > 0)  # the LF joining it to the one before
                values += 1
                largest = max(largest, size)
        return largest


BLANK = Line(b"", None)


@st.composite
def sse_streams(draw: st.DrawFn) -> Built:
    """A well-formed stream, up to six events of up to four lines each and an undispatched tail."""
    events = draw(
        st.lists(st.lists(st.one_of(data_lines(), other_lines()), max_size=4), max_size=6)
    )
    tail = draw(st.lists(st.one_of(data_lines(), other_lines()), max_size=2))  # never dispatched
    unended = draw(st.one_of(st.just(b""), line_text))

    lines: list[Line] = []
    for event in events:
        lines += [*event, BLANK]  # the blank line dispatches it
    lines += tail

    out = bytearray(BOM if draw(st.booleans()) else b"")
    previous_end = b""
    for line in lines:
        end = draw(wire_ends)
        if previous_end == b"\r" and line.text == b"" and end == b"\n":
            end = b"\r\n"  # a lone LF after a lone CR would join it as one CRLF
        out += line.text + end
        previous_end = end
    out += unended
    return Built(bytes(out), lines, unended)


@settings(max_examples=300, deadline=None)
@given(built=sse_streams(), both_caps=caps, data=st.data())
def test_well_formed_streams_give_their_payloads(
    built: Built, both_caps: tuple[int, int], data: st.DataObject
) -> None:
    cap, event_cap = both_caps
    if data.draw(st.booleans(), label="event cap at the boundary"):
        # Exactly the largest event (accepted), or one byte either side of it; no line cap.
        cap = MIB
        event_cap = max(1, built.largest_event() + data.draw(st.integers(-1, 1)))
    cuts = cut_points(data, built.stream)
    expected, failure = built.expect(cap, event_cap)
    note(f"check_twins({built.stream!r}, {cap}, {event_cap}, cuts={sorted(set(cuts))})")
    note(f"expected={expected!r} failure={failure!r}")
    runs = check_twins(built.stream, cap, event_cap, cuts)
    label(runs)
    for (twin, way), result in runs.items():
        assert result.failure == failure, (twin, way)
        if failure is None or way == "bytewise":
            # Byte by byte, every payload dispatched before the error came out of its own feed.
            assert result.payloads == expected, (twin, way)
        else:
            # The feed that raised took the payloads it had completed with it.
            assert result.payloads == expected[: len(result.payloads)], (twin, way)
