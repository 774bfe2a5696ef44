"""A log or baseline changed on disk is refused at the right line, and left exactly as it was.

Each case starts from a real session the store wrote (11 lines: session_start, then the
conversation in cases.py), changes it the way the case says, then opens it. `open` and
`verify_session` must both refuse it with the file, the line and what is wrong, and the files
must be byte for byte what the tamperer left (nothing is repaired).
"""

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker.proto import SessionStart, User, decode_line, encode_line, next_prev, sha256_hex
from boxmaker.session.errors import LogCorrupt
from boxmaker.session.paths import BASELINE_NAME
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.session.session_cases import BASELINE, CONVERSATION, T0, make_session, t

KINDS = ("torn", "damaged", "duplicated")
Lines = list[bytes]


def rewrite(lines: Lines, i: int, **fields: object) -> bytes:
    """Line i (0-based) re-encoded with other field values, keeping its seq and prev."""
    entry = decode_line(lines[i])
    record = dataclasses.replace(entry.record, **fields)  # type: ignore[arg-type]
    return encode_line(record, entry.seq, entry.prev)


def relink(lines: Lines, i: int) -> bytes:
    """Line i with its prev recomputed from line i-1 as it now is."""
    entry = decode_line(lines[i])
    return encode_line(entry.record, entry.seq, next_prev(lines[i - 1]))


def torn_last_line(lines: Lines) -> Lines:
    return [*lines[:-1], lines[-1][:-7]]


def rewritten_record(lines: Lines) -> Lines:
    out = list(lines)
    out[3] = out[3].replace(b'"prompt_n":812', b'"prompt_n":813')  # line 4, a usage
    return out


def swapped_pair(lines: Lines) -> Lines:
    out = list(lines)
    out[4], out[5] = out[5], out[4]  # lines 5 and 6
    return out


def deleted_middle_line(lines: Lines) -> Lines:
    return lines[:5] + lines[6:]  # line 6 goes


def forged_then_relinked(lines: Lines) -> Lines:
    # Line 6's content forged, its own encoding perfect, and line 7's prev recomputed to match;
    # line 8 still links to the old line 7.
    out = list(lines)
    out[5] = rewrite(out, 5, content="It is 13:48 UTC.")
    out[6] = relink(out, 6)
    return out


def repeated_line(lines: Lines) -> Lines:
    return [*lines[:3], lines[2], *lines[3:]]


def garbage_line(lines: Lines) -> Lines:
    return [*lines[:7], b"not json at all\n", *lines[7:]]


def blank_line(lines: Lines) -> Lines:
    return [*lines[:2], b"\n", *lines[2:]]


def torn_line_inside(lines: Lines) -> Lines:
    return [*lines[:5], lines[5][:-20] + b"\n", *lines[6:]]


def second_session_start(lines: Lines) -> Lines:
    line = encode_line(
        SessionStart(t(70), "s1", 0, 0, BASELINE.hash), len(lines), next_prev(lines[-1])
    )
    return [*lines, line]


def not_a_session_start_first(lines: Lines) -> Lines:
    return [encode_line(User(T0, "hi"), 0, "0" * 64)]


# name -> (tamper, the line the error names, words in the error)
LOG_CASES: dict[str, tuple[Callable[[Lines], Lines], int, str]] = {
    "torn last line": (torn_last_line, 11, "no newline at the end; the last line is incomplete"),
    "rewritten record": (rewritten_record, 5, "prev is"),
    "swapped pair": (swapped_pair, 5, "seq is 5, expected 4"),
    "deleted middle line": (deleted_middle_line, 6, "seq is 6, expected 5"),
    "forged record, next line relinked": (forged_then_relinked, 8, "expected the hash of line 7"),
    "repeated line": (repeated_line, 4, "seq is 2, expected 3"),
    "garbage line": (garbage_line, 8, "not JSON"),
    "blank line": (blank_line, 3, "not JSON"),
    "torn line inside": (torn_line_inside, 6, "not JSON"),
    "second session_start": (second_session_start, 12, "a second session_start"),
    "first line not session_start": (
        not_a_session_start_first,
        1,
        "a log starts with session_start",
    ),
}


@pytest.fixture
def session(tmp_path: Path) -> Path:
    path = make_session(tmp_path)
    assert len(path.read_bytes().splitlines()) == 11
    return path


def refused(home: Path, path: Path, line: int | None, words: str) -> str:
    """Opens and verifies: both refuse, naming `path` (and `line`); the files stay as they were."""
    folder = path.parent
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(LogCorrupt) as info:
        SessionStore(home).open("s1")
    message = str(info.value)
    assert message.startswith(str(path)), message
    if line is not None:
        assert f": line {line}: " in message, message
    assert words in message, message
    found = verify_session(home, "s1")
    assert not found.ok
    # verify adds a hint only when cutting the last line would leave a good log, or no log.
    hints = [f"; this {k} last line is the only fault: `bxctl repair s1` cuts it" for k in KINDS]
    hints.append("; nothing in it was ever acknowledged: `bxctl repair s1` sets the session aside")
    assert found.error in (message, *(message + h for h in hints))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing repaired
    return message


@pytest.mark.parametrize("case", list(LOG_CASES))
def test_a_tampered_log_is_refused_at_the_right_line(
    tmp_path: Path, session: Path, case: str
) -> None:
    tamper, line, words = LOG_CASES[case]
    session.write_bytes(b"".join(tamper(session.read_bytes().splitlines(keepends=True))))
    refused(tmp_path, session, line, words)


def test_the_rewritten_line_is_the_one_before_the_line_named(tmp_path: Path, session: Path) -> None:
    lines = session.read_bytes().splitlines(keepends=True)
    session.write_bytes(b"".join(rewritten_record(lines)))
    message = refused(tmp_path, session, 5, "prev is")
    assert re.search(r"expected the hash of line 4, [0-9a-f]{64}", message)


def test_an_edited_baseline_file_is_refused_at_line_1(tmp_path: Path, session: Path) -> None:
    baseline = session.parent / BASELINE_NAME
    baseline.write_bytes(baseline.read_bytes().replace(b"Be brief.", b"Be verbose."))
    message = str(baseline)
    with pytest.raises(LogCorrupt) as info:
        SessionStore(tmp_path).open("s1")
    assert str(info.value).startswith(message)
    assert f"line 1 of {session} (session_start) records {BASELINE.hash}" in str(info.value)
    assert "the baseline file was changed after the session started" in str(info.value)
    assert verify_session(tmp_path, "s1").error == str(info.value)


def test_an_edited_baseline_with_its_hash_rewritten_breaks_line_2(
    tmp_path: Path, session: Path
) -> None:
    # Forging the baseline means forging session_start too, which breaks the next link.
    baseline = session.parent / BASELINE_NAME
    forged = baseline.read_bytes().replace(b"Be brief.", b"Be verbose.")
    baseline.write_bytes(forged)
    lines = session.read_bytes().splitlines(keepends=True)
    lines[0] = rewrite(lines, 0, baseline=sha256_hex(forged))
    session.write_bytes(b"".join(lines))
    refused(tmp_path, session, 2, "expected the hash of line 1")


def test_a_missing_baseline_file_is_refused(tmp_path: Path, session: Path) -> None:
    (session.parent / BASELINE_NAME).unlink()
    with pytest.raises(LogCorrupt, match=f"{BASELINE_NAME}: missing; line 1 of"):
        SessionStore(tmp_path).open("s1")


def test_a_baseline_not_in_canonical_form_is_refused_even_with_a_matching_hash(
    tmp_path: Path, session: Path
) -> None:
    baseline = session.parent / BASELINE_NAME
    spaced = baseline.read_bytes().replace(b'{"system":', b'{ "system":')
    baseline.write_bytes(spaced)
    lines = session.read_bytes().splitlines(keepends=True)
    lines[0] = rewrite(lines, 0, baseline=sha256_hex(spaced))
    rest = [lines[0]]
    for i in range(1, len(lines)):  # a full forgery: every later link recomputed
        rest.append(encode_line(decode_line(lines[i]).record, i, next_prev(rest[-1])))
    session.write_bytes(b"".join(rest))
    with pytest.raises(LogCorrupt, match="not in the form the store writes"):
        SessionStore(tmp_path).open("s1")


def test_an_empty_log_is_refused(tmp_path: Path, session: Path) -> None:
    session.write_bytes(b"")
    refused(tmp_path, session, None, "empty")


def test_a_missing_log_is_refused(tmp_path: Path, session: Path) -> None:
    session.unlink()
    with pytest.raises(LogCorrupt, match="missing"):
        SessionStore(tmp_path).open("s1")
    assert not verify_session(tmp_path, "s1").ok


def test_a_log_moved_to_another_id_is_refused(tmp_path: Path, session: Path) -> None:
    session.parent.rename(session.parent.with_name("s2"))
    with pytest.raises(LogCorrupt, match="line 1: session_start is for session 's1', not 's2'"):
        SessionStore(tmp_path).open("s2")


# --- the documented limits: what the chain cannot see ---------------------------------------------


def test_limit_a_log_cut_at_a_line_boundary_still_opens(tmp_path: Path, session: Path) -> None:
    lines = session.read_bytes().splitlines(keepends=True)
    session.write_bytes(b"".join(lines[:6]))
    with SessionStore(tmp_path).open("s1") as log:
        assert log.records[1:] == CONVERSATION[:5]


def test_limit_a_full_rewrite_with_every_later_hash_recomputed_opens(
    tmp_path: Path, session: Path
) -> None:
    lines = session.read_bytes().splitlines(keepends=True)
    lines[5] = rewrite(lines, 5, content="It is 13:48 UTC.")
    for i in range(6, len(lines)):
        lines[i] = relink(lines, i)
    session.write_bytes(b"".join(lines))
    with SessionStore(tmp_path).open("s1") as log:
        assert log.records[5].content == "It is 13:48 UTC."  # type: ignore[union-attr]


def test_limit_an_edit_to_the_last_line_alone_opens(tmp_path: Path, session: Path) -> None:
    # No line comes after it to carry its hash.
    lines = session.read_bytes().splitlines(keepends=True)
    lines[-1] = rewrite(lines, len(lines) - 1, got=999)
    session.write_bytes(b"".join(lines))
    with SessionStore(tmp_path).open("s1") as log:
        assert log.records[-1].got == 999  # type: ignore[union-attr]
