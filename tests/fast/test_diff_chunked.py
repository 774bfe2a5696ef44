"""ChunkedDecoder: the two twins against each other, and against themselves cut differently.

Each input is fed once whole and once cut at points Hypothesis draws. Every result must be the
same: the py twin and the c twin, whole and cut. A result is (output, done, unused) or
(exception type, message).
"""

import re
from typing import Any

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from boxmaker._fast import _chunked_c, _chunked_py
from boxmaker.proto.errors import ChunkedError
from tests.support.feed import pieces_at

TWINS: dict[str, type[_chunked_py.ChunkedDecoder] | type[_chunked_c.ChunkedDecoder]] = {
    "py": _chunked_py.ChunkedDecoder,
    "c": _chunked_c.ChunkedDecoder,
}

# Small caps reach the over-the-cap errors with short inputs; half the time, the default.
CAPS = st.one_of(st.just(4096), st.sampled_from([3, 5, 8, 16]))

SETTINGS = settings(max_examples=300, deadline=None)

Result = tuple[Any, ...]


def run(twin: str, cap: int, pieces: list[bytes]) -> Result:
    decoder = TWINS[twin](max_line_bytes=cap)
    try:
        out = [decoder.feed(piece) for piece in pieces]
    except ChunkedError as exc:
        return ("error", type(exc), str(exc))
    return ("ok", b"".join(out), decoder.done, decoder.unused)


def check_all_agree(data: st.DataObject, payload: bytes, cap: int) -> Result:
    """Runs both twins whole and cut; asserts one result for all four; returns it."""
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=12), label="cuts")
    pieces = pieces_at(payload, cuts)
    note(f"payload={payload!r} cap={cap} pieces={pieces!r}")
    expected = run("py", cap, [payload])
    note(f"py whole: {expected!r}")
    # Shown by --hypothesis-show-statistics: which outcomes the inputs reach.
    if expected[0] == "ok":
        event("ok, done" if expected[2] else "ok, not done")
    else:
        event(re.sub(r"\d+", "N", expected[2].split(":")[0]))
    assert run("c", cap, [payload]) == expected, "c whole"
    assert run("py", cap, pieces) == expected, "py cut"
    assert run("c", cap, pieces) == expected, "c cut"
    return expected


# Random bytes, heavy in the tokens the grammar is made of.
SIZE_TOKENS = [b"0", b"1", b"3", b"a", b"F", b"f", b"10000000000000000", b"7fffffffffffffff"]
BAD_TOKENS = [b"g", b"x", b"-", b"8000000000000000"]
EXT_TOKENS = [b" ", b"\t", b";", b";ext", b";a=b"]
LINE_TOKENS = [b"\r\n", b"\r", b"\n", b"0\r\n\r\n", b"X: y\r\n", b"1\r\nx\r\n", b"3\r\nabc"]
TOKENS = st.sampled_from(SIZE_TOKENS + BAD_TOKENS + EXT_TOKENS + LINE_TOKENS)
# Whole size lines, small (so data and its CRLF follow soon) or right at the 2**63-1 limit.
SIZE_LINES = st.builds(
    lambda size, ext: b"%x%s\r\n" % (size, ext),
    st.one_of(st.integers(0, 8), st.integers(2**63 - 2, 2**64 + 1)),
    st.sampled_from([b"", b";x", b" ;a=b"]),
)
NOISE = st.lists(st.one_of(TOKENS, TOKENS, SIZE_LINES, st.binary(max_size=4)), max_size=30).map(
    b"".join
)


@SETTINGS
@given(payload=NOISE, cap=CAPS, data=st.data())
def test_random_bytes_same_result_both_twins_any_cuts(
    payload: bytes, cap: int, data: st.DataObject
) -> None:
    check_all_agree(data, payload, cap)


# Inputs worth keeping: past near-misses and the edges of each rule, fed byte by byte.
PINNED = [
    (b"0\r\n\r\n", 3),
    (b"3\r\nabc\r\r\n", 4096),
    (b"1\r\n\r\r\n", 3),
    (b"12\r\n", 3),  # one byte over the cap: its LF is past where the decoder looks
    (b"1\r\nx\r\n0\r\nab\r\n", 4),
    (b"0000000000000000000000001\r\n", 4096),
    (b"10000000000000000\r\n", 4096),
]


@pytest.mark.parametrize(("payload", "cap"), PINNED)
def test_pinned_inputs_same_result_both_twins_bytewise(payload: bytes, cap: int) -> None:
    bytewise = [payload[i : i + 1] for i in range(len(payload))]
    expected = run("py", cap, [payload])
    assert run("c", cap, [payload]) == expected
    assert run("py", cap, bytewise) == expected
    assert run("c", cap, bytewise) == expected


def hex_case(draw: st.DrawFn, value: int) -> bytes:
    """value in hex, each letter in a random case, with random leading zeros."""
    digits = f"{value:x}"
    digits = "".join(c.upper() if draw(st.booleans()) else c for c in digits)
    return b"0" * draw(st.integers(0, 3)) + digits.encode()


EXT_NAME = st.text("abcxyzABC-!#$%&'*+.^_`|~0123456789", min_size=1, max_size=6)
EXT_VALUE = st.one_of(
    EXT_NAME,
    st.text(st.characters(codec="ascii", exclude_characters='"\\\r\n'), max_size=6).map(
        lambda s: f'"{s}"'
    ),
)
BWS = st.sampled_from(["", " ", "\t", " \t "])


@st.composite
def extensions(draw: st.DrawFn) -> bytes:
    out = ""
    for _ in range(draw(st.integers(0, 3))):
        out += draw(BWS) + ";" + draw(BWS) + draw(EXT_NAME)
        if draw(st.booleans()):
            out += draw(BWS) + "=" + draw(BWS) + draw(EXT_VALUE)
    return out.encode()


TRAILER = st.builds(
    lambda name, value: name.encode() + b": " + value.encode(),
    st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,8}", fullmatch=True),
    st.text(st.characters(codec="ascii", min_codepoint=0x20, max_codepoint=0x7E), max_size=12),
)


@st.composite
def chunked_bodies(draw: st.DrawFn) -> tuple[bytes, bytes, bytes]:
    """(encoded, body, unused): a well-formed chunked body with random framing, then extra."""
    chunks = draw(st.lists(st.binary(min_size=1, max_size=40), max_size=8))
    encoded = b""
    for chunk in chunks:
        encoded += hex_case(draw, len(chunk)) + draw(extensions()) + b"\r\n" + chunk + b"\r\n"
    encoded += b"0" * draw(st.integers(1, 3)) + draw(extensions()) + b"\r\n"
    for trailer in draw(st.lists(TRAILER, max_size=3)):
        encoded += trailer + b"\r\n"
    encoded += b"\r\n"
    unused = draw(st.one_of(st.just(b""), st.binary(max_size=10), st.just(b"0\r\n\r\n")))
    return encoded, b"".join(chunks), unused


@SETTINGS
@given(case=chunked_bodies(), data=st.data())
def test_well_formed_body_round_trips(
    case: tuple[bytes, bytes, bytes], data: st.DataObject
) -> None:
    encoded, body, unused = case
    note(f"body={body!r}")
    assert check_all_agree(data, encoded + unused, 4096) == ("ok", body, True, unused)


@SETTINGS
@given(case=chunked_bodies(), cap=CAPS, data=st.data())
def test_mutated_body_same_result_both_twins_any_cuts(
    case: tuple[bytes, bytes, bytes], cap: int, data: st.DataObject
) -> None:
    """A well-formed body with one byte changed or dropped, or bytes added: the deep errors."""
    encoded, _, unused = case
    payload = encoded + unused
    at = data.draw(st.integers(0, len(payload) - 1), label="at")
    byte = data.draw(st.one_of(st.sampled_from([b"\r", b"\n", b";", b"z"]), TOKENS), label="byte")
    how = data.draw(st.sampled_from(["replace", "drop", "insert"]), label="how")
    if how == "replace":
        payload = payload[:at] + byte + payload[at + 1 :]
    elif how == "drop":
        payload = payload[:at] + payload[at + 1 :]
    else:
        payload = payload[:at] + byte + payload[at:]
    check_all_agree(data, payload, cap)
