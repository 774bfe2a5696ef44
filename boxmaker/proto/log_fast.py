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

import re
from collections.abc import Callable
from hashlib import sha256
from typing import Any

import orjson

from ._codec import MAX_INT, keys
from .ids import SESSION_ID_RE
from .log import (
    GENESIS_PREV,
    Assistant,
    CacheLoss,
    EpochEnd,
    LogRecord,
    SessionStart,
    ToolResult,
    Usage,
    User,
    verify_log,
)
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


def _times_ok(times: list[object]) -> bool:
    """Whether every value is a time `is_time` accepts: the pattern on each, the date once."""
    try:
        if not all(map(_TIME_RE.fullmatch, times)):  # type: ignore[arg-type]
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


def _uint(v: object) -> bool:
    return type(v) is int and 0 <= v <= MAX_INT


def _opt_str(v: object) -> bool:
    return v is None or type(v) is str


# One decoder per record type: a parsed line whose keys are the type's, in order, to the record or
# None. `time` is checked by the caller, for all lines at once. Each decoder's fields are named in
# _DECODERS, and the import-time check below holds them to the classes.


def _session_start(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, session, epoch, slot, baseline = obj.values()
    if (
        type(session) is str
        and SESSION_ID_RE.fullmatch(session) is not None
        and _uint(epoch)
        and _uint(slot)
        and type(baseline) is str
        and _HEX64_RE.fullmatch(baseline) is not None
    ):
        return SessionStart(time, session, epoch, slot, baseline)
    return None


def _user(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, content = obj.values()
    if type(content) is str:
        return User(time, content)
    return None


def _assistant(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, content, reasoning, raw_calls = obj.values()
    if not (_opt_str(content) and _opt_str(reasoning) and type(raw_calls) is list):
        return None
    if not raw_calls:
        return Assistant(time, content, reasoning, ())
    calls = []
    for c in raw_calls:
        if type(c) is not dict or list(c) != _CALL_KEYS:
            return None
        i, name, args = c.values()
        if type(i) is not str or type(name) is not str or type(args) is not str:
            return None
        calls.append(ToolCall(i, name, args))
    return Assistant(time, content, reasoning, tuple(calls))


def _usage(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, cache_n, prompt_n, predicted_n, reasoning_tokens, capped = obj.values()
    if (
        _uint(cache_n)
        and _uint(prompt_n)
        and _uint(predicted_n)
        and _uint(reasoning_tokens)
        and type(capped) is bool
    ):
        return Usage(time, cache_n, prompt_n, predicted_n, reasoning_tokens, capped)
    return None


def _tool_result(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, call, call_id, content, klass, untrusted, truncated = obj.values()
    cls = _CLASSES.get(klass) if type(klass) is str else None
    if (
        cls is not None
        and _uint(call)
        and type(call_id) is str
        and type(content) is str
        and type(untrusted) is bool
        and type(truncated) is bool
    ):
        return ToolResult(time, call, call_id, content, cls, untrusted, truncated)
    return None


def _cache_loss(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, expected, got = obj.values()
    if _uint(expected) and _uint(got):
        return CacheLoss(time, expected, got)
    return None


def _epoch_end(obj: dict[str, Any]) -> LogRecord | None:
    _, _, _, time, epoch = obj.values()
    if _uint(epoch):
        return EpochEnd(time, epoch)
    return None


_Decoder = Callable[[dict[str, Any]], LogRecord | None]
_DECODERS: tuple[tuple[type[LogRecord], tuple[str, ...], _Decoder], ...] = (
    (SessionStart, ("time", "session", "epoch", "slot", "baseline"), _session_start),
    (User, ("time", "content"), _user),
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
    (EpochEnd, ("time", "epoch"), _epoch_end),
)
for _cls, _fields, _ in _DECODERS:
    if keys(_cls) != _fields:  # a record type changed: change its decoder with it
        raise RuntimeError(f"log_fast: {_cls.__name__} has the fields {keys(_cls)}, not {_fields}")

# The exact key tuple of a line -> (its type tag, its decoder).
_BY_KEYS: dict[tuple[str, ...], tuple[str, _Decoder]] = {
    ("type", "seq", "prev", *fields): (cls.TAG, dec) for cls, fields, dec in _DECODERS
}


def _fast(data: bytes) -> tuple[list[LogRecord], str] | None:
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
    prev = GENESIS_PREV
    seq = 0
    try:
        for line in data.splitlines(keepends=True):
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
            seq += 1
        if not _times_ok(times):
            return None
    except Exception:  # anything unexpected: let verify_log judge
        return None
    return records, prev


def verify_records(data: bytes) -> tuple[list[LogRecord], str]:
    """`verify_log(data)`'s records and next prev, decided the fast way when the log is good.

    Raises:
        RecordError: exactly what `verify_log(data)` raises (it is what runs on a bad log).
    """
    if not data:
        return [], GENESIS_PREV
    fast = _fast(data)
    if fast is not None:
        return fast
    verified = verify_log(data)
    return list(verified.records), verified.next_prev
