"""The one time format in logs and tool results: RFC 3339 in UTC, e.g. `2026-11-30T03:48:37.123Z`.

`format_time` writes it (milliseconds, upper-case `T` and `Z`); `is_time` accepts what RFC 3339
section 5.6 allows in UTC with upper-case letters: seconds required, 1 to 9 fraction digits
optional, offset `Z` only. The clock is a parameter: nothing here reads it.
"""

import re
from datetime import UTC, datetime

from .errors import EncodeError

TIME_EXAMPLE = "2026-11-30T03:48:37.123Z"

# ASCII digits spelt out: re's \d also matches other scripts' digits.
_TIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]{1,9})?Z"
)


def is_time(s: str) -> bool:
    """Whether `s` is an RFC 3339 UTC time naming a real instant (no 31 April, no 24:00).

    A leap second (`:60`) is refused: Python's datetime cannot hold one, so it would not round-trip.
    """
    m = _TIME_RE.fullmatch(s)
    if m is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    try:
        datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return False
    return True


def format_time(dt: datetime) -> str:
    """`dt` as the log's time: UTC, milliseconds (truncated), `Z`.

    Raises:
        EncodeError: `dt` is naive, so the instant it names is unknown.
    """
    if dt.utcoffset() is None:
        raise EncodeError("time: a naive datetime names no instant; pass one with a timezone")
    u = dt.astimezone(UTC)
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        f".{u.microsecond // 1000:03d}Z"
    )


_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def clock_text(dt: datetime) -> str:
    """The clock tool's answer (brokerd's, and loopd's own without brokerd): `format_time(dt)`,
    then its weekday, `2026-12-03T23:22:03.954Z, a Thursday`. Asked what day of the week it
    was, the tool model read the bare time out (issue 40); with the weekday in brackets it
    answered "what's today's date?" with "Thank you!" (docs/decisions/agent-tasks.md). English
    whatever the locale."""
    return f"{format_time(dt)}, a {_WEEKDAYS[dt.astimezone(UTC).weekday()]}"
