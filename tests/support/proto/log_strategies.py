"""Hypothesis strategies for log records: any record the log format can carry (tests/proto's round
trips and tests/session's replay draw from them)."""

from datetime import datetime

from hypothesis import strategies as st

from boxmaker.proto.log import (
    Assistant,
    CacheLoss,
    CacheRestored,
    CacheSaved,
    EpochEnd,
    LogRecord,
    SessionStart,
    Stopped,
    ToolResult,
    Usage,
    User,
)
from boxmaker.proto.tool import ResultClass, ToolCall

texts = st.text(st.characters(codec="utf-8"), max_size=200)
opt_texts = st.none() | texts
uints = st.integers(0, 2**63 - 1)
hexes = st.binary(min_size=32, max_size=32).map(bytes.hex)


def _time(dt: datetime, digits: int) -> str:
    """An RFC 3339 UTC time with 0 to 9 fraction digits (strftime does not pad years < 1000)."""
    fraction = f".{dt.microsecond:06d}{dt.day * 7 % 1000:03d}"[: digits + 1] if digits else ""
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
        f"{fraction}Z"
    )


times = st.builds(_time, st.datetimes(), st.integers(0, 9))
session_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", fullmatch=True)
tool_calls = st.builds(ToolCall, texts, texts, texts)
records: st.SearchStrategy[LogRecord] = st.one_of(
    st.builds(SessionStart, times, session_ids, uints, uints, hexes),
    st.builds(User, times, texts),
    st.builds(Assistant, times, opt_texts, opt_texts, st.lists(tool_calls, max_size=3).map(tuple)),
    st.builds(Usage, times, uints, uints, uints, uints, st.booleans()),
    st.builds(
        ToolResult,
        times,
        uints,
        texts,
        texts,
        st.just(ResultClass.PUBLIC),
        st.booleans(),
        st.booleans(),
    ),
    st.builds(CacheLoss, times, uints, uints),
    st.builds(CacheSaved, times, uints, uints, uints, uints),
    st.builds(CacheRestored, times, uints, uints, uints, uints),
    st.builds(EpochEnd, times, uints, texts, uints, hexes, uints, uints, uints),
    st.builds(Stopped, times, texts),
)
