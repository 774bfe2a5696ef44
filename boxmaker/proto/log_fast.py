"""`verify_records`: `verify_log` for the resume path, several times faster on a good log.

A session resumes by reading its whole log, so the check of every line is on the path of every
restart. `verify_log` decodes each line through the generic codecs and then re-encodes the record
to prove the line canonical: about 20 us a line, 2 s for 100,000 lines. This module proves the
same verdict with less work:

- each line is parsed once (orjson); its key order is checked by looking the exact key tuple up
  in a table built from the record classes' own field lists, which also picks the class;
- each value is checked with a direct type test, per record type (the checks below mirror the
  codecs in `_codec`: str, str or null, 0..2^63-1 int, bool, RFC 3339 time, session id, hex
  digest, result class, tool calls);
- the line is canonical when `orjson.dumps` of the parsed object gives back its exact bytes: a
  parsed object whose keys and value types are those of a record dumps to the bytes
  `encode_line` writes for it.

Soundness is what matters, not completeness: whenever anything here fails or is unsure (any
exception, any check, a CR in the data), the generic `verify_log` runs instead and gives the
verdict and the error message. So this module can only make a good log faster, never accept a
line `verify_log` refuses. tests/proto/test_log_fast.py checks it against `verify_log` on the
golden logs, every broken-log case and random records and mutations.
"""

import gc
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from hashlib import sha256
from typing import Any

import orjson

from ._codec import MAX_INT, keys
from .ids import CLIENT_REF_RE, SESSION_ID_RE
from .log import (
    GENESIS_PREV,
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
    verify_log,
)
from .make import maker
from .rfc3339 import is_time
from .tool import ResultClass, ToolCall

# is_time's rule, with the clock-face ranges in the pattern and the calendar date checked once per
# distinct date (a log's times share a few dates): hours 00-23, minutes and seconds 00-59 (no
# leap second), the date one that exists.
_TIME_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?Z"
)
_HEX64_RE = re.compile(r"[0-9a-f]{64}")

_DATES: dict[str, bool] = {}
_MAX_DATES = 4096
_CLASSES = {c.value: c for c in ResultClass}
_CALL_KEYS = ["id", "name", "arguments"]


def _times_ok(times: Sequence[object]) -> bool:
    """Whether every value is a time `is_time` accepts: the pattern on each (on all at once when
    they share the millisecond shape), the date once."""
    try:
        shaped = _ms_times_ok(times)  # type: ignore[arg-type]
        if shaped is None:
            shaped = all(map(_TIME_RE.fullmatch, times))  # type: ignore[arg-type]
        if not shaped:
            return False
    except TypeError:  # not a string
        return False
    for date in {t[:10] for t in times}:  # type: ignore[index]
        ok = _DATES.get(date)
        if ok is None:
            if len(_DATES) >= _MAX_DATES:
                _DATES.clear()
            ok = _DATES[date] = is_time(date + "T00:00:00Z")
        if not ok:
            return False
    return True


# A time as Boxmaker writes it, "2026-11-30T03:48:37.123Z", with its digits as 0 and a newline.
_MS_SHAPE = b"0000-00-00T00:00:00.000Z\n"
_DIGITS_AS_0 = bytes.maketrans(b"0123456789", b"0000000000")
# The highest hour units digit for each hour tens digit ("/" is below "0": no digit passes).
_HOUR_UNITS_MAX = bytes.maketrans(b"0123456789", b"993///////")


def _ms_times_ok(times: list[str]) -> bool | None:
    """_TIME_RE on every time at once, by columns, when all have the millisecond shape; None
    when they do not (then each goes through _TIME_RE).

    The times are joined, one per 25 bytes: when the joined bytes with every digit as 0 are
    _MS_SHAPE n times, each time has the pattern's shape (a newline inside a time, or a time of
    another length, moves a newline off its column). What is left are the ranges: the tens of
    minutes and seconds at most 5, the hour at most 23.

    Raises:
        TypeError: a value is not a string.
    """
    joined = "\n".join(times) + "\n"
    n = len(times)
    if not joined.isascii() or len(joined) != len(_MS_SHAPE) * n:
        return None
    data = joined.encode()
    if data.translate(_DIGITS_AS_0) != _MS_SHAPE * n:
        return None
    hour_units_max = data[11::25].translate(_HOUR_UNITS_MAX)
    return (
        max(data[14::25]) <= ord("5")
        and max(data[17::25]) <= ord("5")
        and all(map(operator.le, data[12::25], hour_units_max))
    )


_session_start_of = maker(SessionStart)
_user_of = maker(User)
_assistant_of = maker(Assistant)
_usage_of = maker(Usage)
_tool_result_of = maker(ToolResult)
_cache_loss_of = maker(CacheLoss)
_cache_saved_of = maker(CacheSaved)
_cache_restored_of = maker(CacheRestored)
_epoch_end_of = maker(EpochEnd)
_stopped_of = maker(Stopped)
_tool_call_of = maker(ToolCall)


# One decoder per record type: a parsed line whose keys are the type's, in order, to the record or
# None. `time` is checked by the caller, for all lines at once. Each decoder's fields are named in
# _DECODERS, and the import-time check below holds them to the classes. The checks are written
# out inline (`type(v) is int and 0 <= v <= MAX_INT` is the UINT codec's rule): a helper function
# per value costs more than the test itself.


def _session_start(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, session, epoch, slot, baseline = obj.values()
    if (
        type(session) is str
        and SESSION_ID_RE.fullmatch(session) is not None
        and type(epoch) is int
        and 0 <= epoch <= MAX_INT
        and type(slot) is int
        and 0 <= slot <= MAX_INT
        and type(baseline) is str
        and _HEX64_RE.fullmatch(baseline) is not None
    ):
        return _session_start_of(time, session, epoch, slot, baseline)
    return None


def _user(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, content = obj.values()
    if type(content) is str:
        return _user_of(time, content, None)
    return None


def _user_ref(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, content, ref = obj.values()
    if type(content) is str and type(ref) is str and CLIENT_REF_RE.fullmatch(ref) is not None:
        return _user_of(time, content, ref)
    return None


def _stopped(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, shown = obj.values()
    if type(shown) is str:
        return _stopped_of(time, shown)
    return None


def _assistant(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, content, reasoning, raw_calls = obj.values()
    if not (
        (content is None or type(content) is str)
        and (reasoning is None or type(reasoning) is str)
        and type(raw_calls) is list
    ):
        return None
    if not raw_calls:
        return _assistant_of(time, content, reasoning, ())
    calls = []
    for c in raw_calls:
        if type(c) is not dict or list(c) != _CALL_KEYS:
            return None
        i, name, args = c.values()
        if type(i) is not str or type(name) is not str or type(args) is not str:
            return None
        calls.append(_tool_call_of(i, name, args))
    return _assistant_of(time, content, reasoning, tuple(calls))


def _usage(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, cache_n, prompt_n, predicted_n, reasoning_tokens, capped = obj.values()
    if (
        type(cache_n) is int
        and type(prompt_n) is int
        and type(predicted_n) is int
        and type(reasoning_tokens) is int
        and min(cache_n, prompt_n, predicted_n, reasoning_tokens) >= 0
        and max(cache_n, prompt_n, predicted_n, reasoning_tokens) <= MAX_INT
        and type(capped) is bool
    ):
        return _usage_of(time, cache_n, prompt_n, predicted_n, reasoning_tokens, capped)
    return None


def _tool_result(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, call, call_id, content, klass, untrusted, truncated = obj.values()
    cls = _CLASSES.get(klass) if type(klass) is str else None
    if (
        cls is not None
        and type(call) is int
        and 0 <= call <= MAX_INT
        and type(call_id) is str
        and type(content) is str
        and type(untrusted) is bool
        and type(truncated) is bool
    ):
        return _tool_result_of(time, call, call_id, content, cls, untrusted, truncated)
    return None


def _cache_loss(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, expected, got = obj.values()
    if (
        type(expected) is int
        and type(got) is int
        and 0 <= min(expected, got) <= max(expected, got) <= MAX_INT
    ):
        return _cache_loss_of(time, expected, got)
    return None


def _cache_io(obj: dict[str, Any]) -> tuple[Any, ...] | None:
    """The fields of a cache_saved or cache_restored line (their keys differ in one name, so
    _BY_KEYS tells them apart), when all four counts are UINTs."""
    _, _, _, time, slot, tokens, size, elapsed = obj.values()
    counts = (slot, tokens, size, elapsed)
    if all(type(v) is int for v in counts) and min(counts) >= 0 and max(counts) <= MAX_INT:
        return (time, *counts)
    return None


def _cache_saved(obj: dict[str, Any]) -> LogRecord | None:
    fields = _cache_io(obj)
    return None if fields is None else _cache_saved_of(*fields)


def _cache_restored(obj: dict[str, Any]) -> LogRecord | None:
    fields = _cache_io(obj)
    return None if fields is None else _cache_restored_of(*fields)


def _epoch_end(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, epoch, summary, keep_from, baseline, cache_n, prompt_n, predicted_n = (
        obj.values()
    )
    counts = (epoch, keep_from, cache_n, prompt_n, predicted_n)
    if (
        all(type(v) is int and 0 <= v <= MAX_INT for v in counts)
        and type(summary) is str
        and type(baseline) is str
        and _HEX64_RE.fullmatch(baseline)
    ):
        return _epoch_end_of(
            time, epoch, summary, keep_from, baseline, cache_n, prompt_n, predicted_n
        )
    return None


_Decoder = Callable[[dict[str, Any]], LogRecord | None]
_DECODERS: tuple[tuple[type[LogRecord], tuple[str, ...], _Decoder], ...] = (
    (SessionStart, ("time", "session", "epoch", "slot", "baseline"), _session_start),
    (User, ("time", "content", "client_ref"), _user_ref),
    (Assistant, ("time", "content", "reasoning_content", "tool_calls"), _assistant),
    (
        Usage,
        ("time", "cache_n", "prompt_n", "predicted_n", "reasoning_tokens", "thinking_capped"),
        _usage,
    ),
    (
        ToolResult,
        ("time", "call", "tool_call_id", "content", "class", "untrusted", "truncated"),
        _tool_result,
    ),
    (CacheLoss, ("time", "expected", "got"), _cache_loss),
    (CacheSaved, ("time", "slot", "tokens", "written", "elapsed_us"), _cache_saved),
    (CacheRestored, ("time", "slot", "tokens", "read", "elapsed_us"), _cache_restored),
    (
        EpochEnd,
        (
            "time",
            "epoch",
            "summary",
            "keep_from",
            "baseline",
            "cache_n",
            "prompt_n",
            "predicted_n",
        ),
        _epoch_end,
    ),
    (Stopped, ("time", "shown"), _stopped),
)
for _cls, _fields, _ in _DECODERS:
    if keys(_cls) != _fields:  # a record type changed: change its decoder with it
        raise RuntimeError(f"log_fast: {_cls.__name__} has the fields {keys(_cls)}, not {_fields}")

# The exact key tuple of a line -> (its type tag, its decoder). A user line may leave its optional
# client_ref out (M4): that spelling has a decoder of its own.
_BY_KEYS: dict[tuple[str, ...], tuple[str, _Decoder]] = {
    ("type", "seq", "prev", *fields): (cls.TAG, dec) for cls, fields, dec in _DECODERS
}
_BY_KEYS[("type", "seq", "prev", "time", "content")] = (User.TAG, _user)
if len(_BY_KEYS) != len(_DECODERS) + 1:  # two record types with the same keys: one would shadow
    raise RuntimeError("log_fast: two record types have the same keys; rename a field")


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Holds off the cyclic garbage collector. A resume allocates a few objects per line and keeps
    most of them; every 700 kept allocations would start a collection that walks the young ones
    (and now and then all of them) and finds nothing to free: a tenth of a resume's time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _fast(data: bytes, first_prev: str = GENESIS_PREV) -> tuple[list[LogRecord], str] | None:
    """The records and the next prev when every line passes, else None (never raises)."""
    # A CR would let splitlines cut where verify_log does not; orjson never writes a raw one.
    if data[-1:] != b"\n" or b"\r" in data:
        return None
    loads, dumps, append_nl, by_keys = (
        orjson.loads,
        orjson.dumps,
        orjson.OPT_APPEND_NEWLINE,
        _BY_KEYS,
    )
    records: list[LogRecord] = []
    times: list[object] = []
    prev = first_prev
    try:
        with _gc_paused():
            for seq, line in enumerate(data.splitlines(keepends=True)):
                obj = loads(line)
                found = by_keys.get(tuple(obj))  # TypeError (caught) when obj is not a dict
                if (
                    found is None
                    or obj["type"] != found[0]
                    or obj["prev"] != prev
                    or obj["seq"] != seq
                    or type(obj["seq"]) is not int
                ):
                    return None
                record = found[1](obj)
                if record is None or dumps(obj, option=append_nl) != line:
                    return None
                records.append(record)
                times.append(obj["time"])
                prev = sha256(line).hexdigest()
        if not _times_ok(times):
            return None
    except Exception:  # anything unexpected: let verify_log judge
        return None
    return records, prev


def verify_records(data: bytes, first_prev: str = GENESIS_PREV) -> tuple[list[LogRecord], str]:
    """`verify_log(data, first_prev)`'s records and next prev, decided the fast way when the log
    is good.

    Raises:
        RecordError: exactly what `verify_log(data, first_prev)` raises (it runs on a bad log).
    """
    if not data:
        return [], first_prev
    fast = _fast(data, first_prev)
    if fast is not None:
        return fast
    verified = verify_log(data, first_prev)
    return list(verified.records), verified.next_prev
