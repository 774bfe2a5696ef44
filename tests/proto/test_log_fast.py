"""proto.log_fast: the resume path's verify gives verify_log's verdict, never a laxer one.

`verify_records` must return what `verify_log` returns on every good log and raise what it raises
on every bad one. The fast path itself (`_fast`) may give up (None) on anything, but it must never
accept a log verify_log refuses, nor return other records.
"""

import re
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boxmaker.proto.errors import RecordError
from boxmaker.proto.log import GENESIS_PREV, LogRecord, encode_line, next_prev, verify_log
from boxmaker.proto.log_fast import _TIME_RE, _fast, _ms_times_ok, _times_ok, verify_records
from boxmaker.proto.rfc3339 import is_time
from tests.support.proto.log_cases import BAD_LINES, BROKEN_LOGS, LINES, SESSION_DATA
from tests.support.proto.log_strategies import records


def outcome(data: bytes) -> tuple[str, object]:
    try:
        return ("ok", verify_records(data))
    except RecordError as e:
        return ("error", str(e))


def reference(data: bytes) -> tuple[str, object]:
    try:
        v = verify_log(data)
    except RecordError as e:
        return ("error", str(e))
    return ("ok", (list(v.records), v.next_prev))


def assert_same(data: bytes) -> None:
    assert outcome(data) == reference(data)
    fast = _fast(data) if data else None
    if fast is not None:  # when the fast path decides, it decides as verify_log does
        assert reference(data) == ("ok", fast)


def log_of(recs: list[LogRecord]) -> bytes:
    out, prev = [], GENESIS_PREV
    for seq, rec in enumerate(recs):
        line = encode_line(rec, seq, prev)
        out.append(line)
        prev = next_prev(line)
    return b"".join(out)


def test_the_golden_session_takes_the_fast_path() -> None:
    assert _fast(SESSION_DATA) is not None
    assert_same(SESSION_DATA)


def test_every_golden_line_alone_at_seq_0_agrees() -> None:
    for seq_prev_record in LINES.values():
        assert_same(log_of([seq_prev_record[2]]))


@pytest.mark.parametrize("case", list(BROKEN_LOGS))
def test_broken_logs_raise_what_verify_log_raises(case: str) -> None:
    data, words = BROKEN_LOGS[case]
    assert _fast(data) is None
    with pytest.raises(RecordError, match=re.escape(words)):
        verify_records(data)
    assert_same(data)


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_each_bad_line_as_a_first_line_is_refused_the_same_way(case: str) -> None:
    line, _ = BAD_LINES[case]
    assert_same(line)
    assert_same(SESSION_DATA + line)


def first_lines() -> dict[str, dict[str, Any]]:
    """Each golden line's object, made the first line of a log (seq 0, 64 zeros)."""
    out = {}
    for name, (_, _, record) in LINES.items():
        obj = orjson.loads(encode_line(record, 0, GENESIS_PREV))
        out[name] = obj
    return out


FIRST = first_lines()
WRONG_VALUES: list[object] = [None, True, False, 0, -1, 1.5, 2**63, "x", "", [], {}, [{}]]


@pytest.mark.parametrize("name", list(FIRST))
def test_every_field_with_every_wrong_type_agrees(name: str) -> None:
    obj = FIRST[name]
    assert _fast(orjson.dumps(obj) + b"\n") is not None
    for key in obj:
        for value in WRONG_VALUES:
            if value == obj[key] and type(value) is type(obj[key]):
                continue
            assert_same(orjson.dumps({**obj, key: value}) + b"\n")


NOT_CANONICAL = {
    "leading space": (b"{", b" {"),
    "space after a colon": (b'"seq":0', b'"seq": 0'),
    "minus zero": (b'"seq":0', b'"seq":-0'),
    "zero as a float": (b'"seq":0', b'"seq":0.0'),
    "exponent": (b'"seq":0', b'"seq":0e0'),
    "escaped slash": (b'"type":"', b'"type":"\\/'),
    "escaped letter": (b'"time":"2', b'"time":"\\u0032'),
    "duplicate key": (b'"seq":0,', b'"seq":0,"seq":0,'),
    "space before the newline": (b"}\n", b"} \n"),
    "tab before the newline": (b"}\n", b"}\t\n"),
}


@pytest.mark.parametrize("name", list(FIRST))
@pytest.mark.parametrize("how", list(NOT_CANONICAL))
def test_a_line_not_in_canonical_form_is_refused_as_verify_log_refuses(name: str, how: str) -> None:
    old, new = NOT_CANONICAL[how]
    line = orjson.dumps(FIRST[name]) + b"\n"
    bad = line.replace(old, new, 1)
    assert bad != line
    assert _fast(bad) is None
    assert_same(bad)


def test_an_empty_log() -> None:
    assert verify_records(b"") == ([], GENESIS_PREV)


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=8))
def test_random_logs_agree_and_take_the_fast_path(recs: list[LogRecord]) -> None:
    data = log_of(recs)
    assert _fast(data) == (recs, verify_log(data).next_prev)


@settings(max_examples=600, deadline=None)
@given(st.lists(records, min_size=1, max_size=4), st.data())
def test_mutated_logs_agree(recs: list[LogRecord], data: st.DataObject) -> None:
    log = bytearray(log_of(recs))
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        at = data.draw(st.integers(0, max(len(log) - 1, 0)), label="at")
        how = data.draw(st.sampled_from(["flip", "delete", "insert", "cr"]), label="how")
        byte = data.draw(st.integers(0, 255), label="byte")
        if not log:
            break
        if how == "flip":
            log[at] ^= byte or 1
        elif how == "delete":
            del log[at]
        elif how == "insert":
            log.insert(at, byte)
        else:
            log.insert(at, 13)
    assert_same(bytes(log))


# The time rule, drawn near its edges: every field over its range, leap seconds, 31 April, 29
# February in leap and common years, year 0, fractions of 0 to 10 digits, a lower-case z.
_digits = st.integers(0, 99).map(lambda n: f"{n:02d}")
near_times = st.builds(
    lambda y, mo, d, h, mi, s, frac, z: f"{y:04d}-{mo}-{d}T{h}:{mi}:{s}{frac}{z}",
    st.sampled_from([0, 1, 1900, 2000, 2024, 2026, 2100, 9999]),
    _digits,
    _digits,
    _digits,
    _digits,
    _digits,
    st.sampled_from(["", ".", ".1", ".123", ".123456789", ".1234567890"]),
    st.sampled_from(["Z", "z", "", "+00:00"]),
)


@settings(max_examples=1000, deadline=None)
@given(near_times | st.text(max_size=30))
@example("2026-02-29T00:00:00Z")
@example("2024-02-29T23:59:59.999Z")
@example("2026-04-31T00:00:00Z")
@example("2026-11-30T03:48:60Z")
@example("0000-01-01T00:00:00Z")
@example("2026-11-30T03:48:37Z\n2026-11-30T03:48:37Z")
def test_the_fast_time_check_is_is_time(s: str) -> None:
    assert _times_ok([s]) == is_time(s)
    assert _times_ok(["2026-11-30T03:48:37.123Z", s]) == is_time(s)


def test_the_time_check_refuses_a_non_string() -> None:
    assert not _times_ok(["2026-11-30T03:48:37Z", 5])


# Times in the millisecond shape, every digit free: the column check must agree with the pattern.
ms_shaped = st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z")


@settings(max_examples=500, deadline=None)
@given(st.lists(ms_shaped | near_times, min_size=1, max_size=5))
@example(["2026-11-30T24:00:00.000Z"])
@example(["2026-11-30T19:59:59.999Z", "2026-11-30T23:00:00.000Z"])
@example(["2026-11-30T03:48:37.123Z\n2026-11-30T03:48:37.123Z", "2026-11-30T03:48:37"])
def test_the_column_time_check_is_the_pattern(times: list[str]) -> None:
    assert _times_ok(times) == all(map(is_time, times))
    shaped = _ms_times_ok(times)
    if shaped is not None:
        assert shaped == all(_TIME_RE.fullmatch(t) is not None for t in times)
