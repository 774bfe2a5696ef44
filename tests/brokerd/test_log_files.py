"""Issue 38 items 2 and 5, the decision log's files as the verifiers read them: by the home-file
rules (a FIFO, a link to /dev/zero or a folder among the rotated files is one clear line, never a
hang or a MemoryError), in `brokerd verify`, `bxctl verify-broker` and `bxctl history`'s reader;
an emptied current file after a rotation is named as what is missing; every failure names the
file and its own line number."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker.brokerd.ledger import Ledger
from boxmaker.brokerd.log import DecisionLog
from boxmaker.session.chain_files import archives

BOUND_S = 60.0

READERS = {
    "brokerd verify": lambda log: [
        sys.executable,
        "-m",
        "boxmaker.brokerd",
        "verify",
        "--log",
        log,
    ],
    "bxctl verify-broker": lambda log: [
        sys.executable,
        "-m",
        "boxmaker.bxctl",
        "verify-broker",
        log,
    ],
    "bxctl history's reader": lambda log: [
        sys.executable,
        "-c",
        "import sys; from pathlib import Path; from boxmaker.bxctl import decisions\n"
        "try:\n    decisions.read_asks(Path(sys.argv[1]), 's')\n"
        "except (OSError, decisions.ChainError) as e:\n    print('FAILED', e); sys.exit(1)\n"
        "print('ok')",
        log,
    ],
}


def rotated_log(tmp_path: Path, files: int = 3) -> Path:
    log = tmp_path / "decisions.jsonl"
    d = DecisionLog(str(log), Ledger(), rotate_bytes=2048)
    try:
        while len(archives(str(log))) < files:
            d.append("start", grants="", workspace="/ws")
        for _ in range(5):  # the current file: a carry and five lines
            d.append("start", grants="", workspace="/ws")
    finally:
        d.close()
    return log


def run(reader: str, log: Path) -> tuple[int, str]:
    done = subprocess.run(
        READERS[reader](str(log)), capture_output=True, text=True, timeout=BOUND_S, check=False
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def as_fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def as_zero_link(p: Path) -> None:
    p.unlink()
    p.symlink_to("/dev/zero")


def as_folder(p: Path) -> None:
    p.unlink()
    p.mkdir()


def as_link_to_a_copy(p: Path) -> None:
    copy = p.with_name("elsewhere")
    p.rename(copy)
    p.symlink_to(copy)


KINDS: dict[str, Callable[[Path], None]] = {
    "a FIFO": as_fifo,
    "a link to /dev/zero": as_zero_link,
    "a folder": as_folder,
    "a link to a copy": as_link_to_a_copy,
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", ["decisions.jsonl.2", "decisions.jsonl"])
def test_a_log_file_that_is_not_a_regular_file_is_one_line(
    tmp_path: Path, reader: str, kind: str, which: str
) -> None:
    log = rotated_log(tmp_path)
    KINDS[kind](log.with_name(which))
    status, out = run(reader, log)  # within BOUND_S, or TimeoutExpired fails the test
    assert status != 0, out
    assert "Traceback" not in out
    assert "MemoryError" not in out
    assert which in out, out
    assert len(out.splitlines()) == 1, out


@pytest.mark.parametrize("reader", READERS)
def test_an_emptied_current_log_after_a_rotation_says_what_is_missing(
    tmp_path: Path, reader: str
) -> None:
    log = rotated_log(tmp_path)
    log.write_bytes(b"")
    status, out = run(reader, log)
    assert status != 0, out
    assert "empty, but decisions.jsonl.3 is there" in out, out
    assert "is gone" in out


@pytest.mark.parametrize("reader", READERS)
def test_a_deleted_current_log_after_a_rotation_says_what_is_missing(
    tmp_path: Path, reader: str
) -> None:
    log = rotated_log(tmp_path)
    log.unlink()
    status, out = run(reader, log)
    assert status != 0, out
    assert "missing, but decisions.jsonl.3 is there" in out, out


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("file", ["decisions.jsonl.1", "decisions.jsonl.2", "decisions.jsonl"])
def test_a_failure_names_the_file_and_its_own_line(tmp_path: Path, reader: str, file: str) -> None:
    log = rotated_log(tmp_path)
    target = log.with_name(file)
    lines = target.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"workspace":"/ws"', b'"workspace":"/XX"')  # its 3rd line
    target.write_bytes(b"".join(lines))
    status, out = run(reader, log)
    assert status != 0, out
    assert f"{file} line 4:" in out, out  # the line after the edit no longer chains to it


def test_the_verifiers_pass_a_whole_rotated_log(tmp_path: Path) -> None:
    log = rotated_log(tmp_path)
    for reader in READERS:
        status, out = run(reader, log)
        assert status == 0, (reader, out)
