"""The log's time format: what is_time accepts and what format_time writes."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.proto.errors import EncodeError
from boxmaker.proto.rfc3339 import TIME_EXAMPLE, clock_text, format_time, is_time

GOOD = [
    TIME_EXAMPLE,
    "2026-11-30T03:48:37Z",
    "2026-11-30T03:48:37.1Z",
    "2026-11-30T03:48:37.123456789Z",
    "2024-02-29T23:59:59.999Z",  # a leap day
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
]

BAD = [
    ("", "empty"),
    ("2026-11-30", "date only"),
    ("2026-11-30T03:48Z", "no seconds"),
    ("2026-11-30 03:48:37.123Z", "space for T"),
    ("2026-11-30t03:48:37.123z", "lower-case t and z"),
    ("2026-11-30T03:48:37.123", "no offset"),
    ("2026-11-30T03:48:37.123+00:00", "numeric offset, not Z"),
    ("2026-11-30T03:48:37.Z", "empty fraction"),
    ("2026-11-30T03:48:37.1234567890Z", "ten fraction digits"),
    ("2026-11-30T03:48:37.123Z\n", "trailing newline"),
    ("2026-02-30T03:48:37Z", "30 February"),
    ("2025-02-29T03:48:37Z", "29 February in a common year"),
    ("2026-13-01T03:48:37Z", "month 13"),
    ("2026-11-30T24:00:00Z", "hour 24"),
    ("2026-11-30T03:60:00Z", "minute 60"),
    ("2026-12-31T23:59:60Z", "leap second"),
    ("0000-01-01T00:00:00Z", "year 0"),
    ("\uff12\uff10\uff12\uff16-11-30T03:48:37Z", "fullwidth digits"),
    ("+2026-11-30T03:48:37Z", "sign"),
]


@pytest.mark.parametrize("s", GOOD)
def test_good_times(s: str) -> None:
    assert is_time(s)


@pytest.mark.parametrize(("s", "why"), BAD, ids=[w for _, w in BAD])
def test_bad_times(s: str, why: str) -> None:
    assert not is_time(s)


def test_format_time_writes_utc_milliseconds() -> None:
    dt = datetime(2026, 11, 30, 4, 48, 37, 123999, tzinfo=timezone(timedelta(hours=1)))
    assert format_time(dt) == TIME_EXAMPLE


def test_format_time_pads_small_years() -> None:
    assert format_time(datetime(7, 1, 2, 3, 4, 5, tzinfo=UTC)) == "0007-01-02T03:04:05.000Z"


def test_format_time_refuses_a_naive_datetime() -> None:
    with pytest.raises(EncodeError, match="naive"):
        format_time(datetime(2026, 11, 30))  # naive: the point of the test


@given(st.datetimes(timezones=st.just(UTC)))
def test_every_formatted_time_is_a_time_and_names_the_same_millisecond(dt: datetime) -> None:
    s = format_time(dt)
    assert is_time(s)
    back = datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert back == dt.replace(microsecond=dt.microsecond // 1000 * 1000)


def test_clock_text_is_the_time_then_its_weekday_in_utc() -> None:
    thursday = datetime(2026, 12, 3, 23, 22, 3, 954000, tzinfo=UTC)
    assert clock_text(thursday) == "2026-12-03T23:22:03.954Z, a Thursday"
    # 01:30 on Friday at +02:00 is still Thursday in UTC: the weekday is the stamp's
    friday_east = datetime(2026, 12, 4, 1, 30, tzinfo=timezone(timedelta(hours=2)))
    assert clock_text(friday_east) == "2026-12-03T23:30:00.000Z, a Thursday"
    week = [clock_text(thursday + timedelta(days=d)).split(", a ")[1] for d in range(7)]
    assert len(set(week)) == 7
