"""proto.log: golden bytes, strict decoding with named fields, the chain, and random round trips."""

import hashlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.proto.errors import EncodeError, RecordError
from boxmaker.proto.log import (
    GENESIS_PREV,
    RECORD_TYPES,
    Assistant,
    CacheLoss,
    LogLine,
    LogRecord,
    SessionStart,
    Usage,
    User,
    chain,
    decode_line,
    encode_line,
    next_prev,
    verify_log,
)
from boxmaker.proto.tool import ToolCall
from tests.support.proto.log_cases import (
    BAD_LINES,
    BROKEN_LOGS,
    GOLDEN_DIR,
    LINES,
    PREV_ABC,
    SESSION,
    SESSION_DATA,
    SESSION_FILE,
    SESSION_LINES,
    T,
    edited,
    golden,
    make,
)
from tests.support.proto.log_strategies import hexes, records, uints

# --- golden bytes --------------------------------------------------------------------------------


def test_every_record_type_has_a_golden_line() -> None:
    assert {type(rec).TAG for _, _, rec in LINES.values()} == set(RECORD_TYPES)
    assert {p.name for p in GOLDEN_DIR.glob("*.jsonl")} == {f"{n}.jsonl" for n in LINES} | {
        SESSION_FILE
    }


@pytest.mark.parametrize("name", list(LINES))
def test_encode_gives_the_golden_bytes(name: str) -> None:
    seq, prev, record = LINES[name]
    assert encode_line(record, seq, prev) == golden(name)


@pytest.mark.parametrize("name", list(LINES))
def test_golden_lines_decode_to_their_records(name: str) -> None:
    assert decode_line(golden(name)) == LogLine(*LINES[name])
    line = decode_line(golden(name))
    assert encode_line(line.record, line.seq, line.prev) == golden(name)


def test_golden_key_order_is_type_seq_prev_then_the_brief_order() -> None:
    obj = orjson.loads(golden("tool_result"))
    assert list(obj) == [
        "type", "seq", "prev", "time", "call", "tool_call_id", "content", "class", "untrusted",
        "truncated",
    ]  # fmt: skip
    assert list(orjson.loads(golden("session_start"))) == [
        "type", "seq", "prev", "time", "session", "epoch", "slot", "baseline",
    ]  # fmt: skip


def test_escapes_are_json_escapes_and_unicode_is_raw_utf8() -> None:
    esc = golden("user_escapes")
    assert esc.count(b"\n") == 1
    assert b'line one\\nline \\"two\\"\\r\\n\\ttab, back\\\\slash, NUL\\u0000' in esc
    uni = golden("user_unicode")
    assert "日本語 😀".replace(" ", ", emoji ").encode() in uni
    assert "\u2028".encode() in uni  # raw, like every other non-ASCII character


def test_the_whole_log_fixture_verifies_and_decodes_to_the_session() -> None:
    data = (GOLDEN_DIR / SESSION_FILE).read_bytes()
    log = verify_log(data)
    assert list(log.records) == SESSION
    assert log.next_seq == len(SESSION)
    # The chain re-derived here with hashlib directly, not through proto.
    lines = data.splitlines(keepends=True)
    assert log.next_prev == hashlib.sha256(lines[-1]).hexdigest()
    assert [orjson.loads(x)["prev"] for x in lines] == [GENESIS_PREV] + [
        hashlib.sha256(x).hexdigest() for x in lines[:-1]
    ]


# --- strict decoding -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_lines_raise_record_error_naming_what_was_wrong(case: str) -> None:
    line, words = BAD_LINES[case]
    with pytest.raises(RecordError) as info:
        decode_line(line)
    assert words in str(info.value)


def test_null_is_allowed_where_the_field_is_optional() -> None:
    entry = decode_line(golden("assistant_nulls"))
    assert entry.record == Assistant(T, None, None, ())


@pytest.mark.parametrize(
    ("record", "seq", "prev", "words"),
    [
        (User(T, "x"), True, GENESIS_PREV, "seq: expected int, got bool"),
        (User(T, "x"), -1, GENESIS_PREV, "seq: expected integer from 0"),
        (User(T, "x"), 0, "0" * 63, "prev: expected 64 lowercase hex digits"),
        (User("yesterday", "x"), 0, GENESIS_PREV, "user.time: expected an RFC 3339 UTC time"),
        (User(T, "a\udc80b"), 0, GENESIS_PREV, "user.content: lone surrogate at index 1"),
        (
            make(Usage, T, 1, 2, 3, 4, 1),
            0,
            GENESIS_PREV,
            "usage.thinking_capped: expected bool, got int",
        ),
        (CacheLoss(T, 2**63, 0), 0, GENESIS_PREV, "cache_loss.expected: expected integer from 0"),
        (
            make(Assistant, T, None, None, [ToolCall("a", "b", "")]),
            0,
            GENESIS_PREV,
            "assistant.tool_calls: expected tuple, got list",
        ),
        (
            make(Assistant, T, None, None, ("x",)),
            0,
            GENESIS_PREV,
            "assistant.tool_calls[0]: expected ToolCall, got str",
        ),
        (
            SessionStart(T, "a/b", 0, 0, PREV_ABC),
            0,
            GENESIS_PREV,
            "session_start.session: expected a session id",
        ),
        (
            make(ToolCall, "a", "b", "c"),
            0,
            GENESIS_PREV,
            "record: expected a LogRecord, got ToolCall",
        ),
    ],
)
def test_encode_refuses_records_that_would_not_read_back(
    record: LogRecord, seq: int, prev: str, words: str
) -> None:
    with pytest.raises(EncodeError) as info:
        encode_line(record, seq, prev)
    assert words in str(info.value)


# --- the chain -----------------------------------------------------------------------------------


def test_chain_walks_the_fixture_and_ends_at_the_next_prev() -> None:
    prev = GENESIS_PREV
    for line in SESSION_LINES:
        prev = chain(prev, line)
    assert prev == verify_log(SESSION_DATA).next_prev == next_prev(SESSION_LINES[-1])


def test_chain_refuses_a_line_that_links_elsewhere() -> None:
    with pytest.raises(RecordError, match=f"prev: the line links to {GENESIS_PREV}, expected"):
        chain(PREV_ABC, SESSION_LINES[0])


def test_an_empty_log_is_empty() -> None:
    log = verify_log(b"")
    assert (log.lines, log.next_seq, log.next_prev) == ((), 0, GENESIS_PREV)


@pytest.mark.parametrize("case", list(BROKEN_LOGS))
def test_verify_log_names_the_first_bad_line(case: str) -> None:
    data, words = BROKEN_LOGS[case]
    with pytest.raises(RecordError) as info:
        verify_log(data)
    assert words in str(info.value)


def test_edited_then_rehashed_line_still_breaks_the_next_link() -> None:
    # Rewriting line 2 and fixing nothing else: line 3's prev no longer hashes line 2.
    data = edited(1, b"What time", b"What tune")
    with pytest.raises(RecordError, match=r"line 3: prev is .*expected the hash of line 2"):
        verify_log(data)


def test_a_log_cut_at_a_line_boundary_verifies_the_chain_proves_no_tail() -> None:
    # The documented limit: completeness needs a count from elsewhere.
    log = verify_log(b"".join(SESSION_LINES[:5]))
    assert log.next_seq == 5


# --- random round trips --------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(records, uints, hexes)
def test_random_records_round_trip(record: LogRecord, seq: int, prev: str) -> None:
    line = encode_line(record, seq, prev)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_line(line) == LogLine(seq, prev, record)


@settings(max_examples=400, deadline=None)
@given(records, st.data())
def test_mutated_lines_decode_canonically_or_raise_record_error(
    record: LogRecord, data: st.DataObject
) -> None:
    line = bytearray(encode_line(record, 3, PREV_ABC))
    at = data.draw(st.integers(0, len(line) - 1), label="at")
    how = data.draw(st.sampled_from(["flip", "delete", "insert"]), label="how")
    byte = data.draw(st.integers(0, 255), label="byte")
    if how == "flip":
        line[at] ^= byte or 1
    elif how == "delete":
        del line[at]
    else:
        line.insert(at, byte)
    try:
        entry = decode_line(bytes(line))
    except RecordError:
        return  # any other exception fails the test
    assert encode_line(entry.record, entry.seq, entry.prev) == bytes(line)


def test_a_later_epoch_chains_from_the_epoch_end_line() -> None:
    from boxmaker.proto.log_fast import verify_records

    link = "ab" * 32
    start = SessionStart("2026-12-01T00:00:00.000Z", "s1", 1, 0, "cd" * 32)
    line = encode_line(start, 0, link)
    assert verify_log(line, link).records == (start,)
    assert verify_records(line, link) == ([start], next_prev(line))
    for check in (verify_log, verify_records):
        with pytest.raises(RecordError, match=r"line 1: prev is abab.*expected 64 zeros"):
            check(line)
        with pytest.raises(RecordError, match=r"expected (ab){32} \(the previous epoch_end\)"):
            check(encode_line(start, 0, GENESIS_PREV), link)


def test_a_user_record_with_a_client_ref_round_trips_and_one_without_keeps_its_bytes() -> None:
    """M4 section 6: client_ref is optional; left out, the line is what it was before M4."""
    from boxmaker.proto import User, encode_line, verify_log
    from boxmaker.proto.log_fast import verify_records

    t = "2026-12-02T08:00:00.000Z"
    plain = encode_line(User(t, "hi"), 0, GENESIS_PREV)
    assert plain == (
        b'{"type":"user","seq":0,"prev":"'
        + GENESIS_PREV.encode()
        + b'","time":"'
        + t.encode()
        + b'","content":"hi"}\n'
    )
    with_ref = encode_line(User(t, "hi", "mm:abc"), 0, GENESIS_PREV)
    assert with_ref == plain[:-2] + b',"client_ref":"mm:abc"}\n'
    for line, record in ((plain, User(t, "hi")), (with_ref, User(t, "hi", "mm:abc"))):
        assert verify_log(line).records == (record,)
        assert verify_records(line)[0] == [record]
    for bad in (b'"client_ref":"a b"', b'"client_ref":""', b'"client_ref":null'):
        line = plain[:-2] + b"," + bad + b"}\n"
        with pytest.raises(RecordError, match="client_ref"):
            verify_log(line)
        with pytest.raises(RecordError, match="client_ref"):
            verify_records(line)
