"""Issue 38 items 2 and 5, the decision log's files as the verifiers read them: by the home-file
rules (a FIFO, a link to /dev/zero or a folder among the rotated files is one clear line, never a
hang or a MemoryError), in `brokerd verify`, `bxctl verify-broker` and `bxctl history`'s reader;
an emptied current file after a rotation is named as what is missing; every failure names the
file and its own line number."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker.brokerd.ledger import Ledger
from boxmaker.brokerd.log import DecisionLog
from boxmaker.proto.decision import Start
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
            d.append(Start, grants="", workspace="/ws")
        for _ in range(5):  # the current file: a carry and five lines
            d.append(Start, grants="", workspace="/ws")
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


READER_MODULES = [
    "boxmaker/session/chain_files.py",
    "boxmaker/bxctl/decisions.py",
    "boxmaker/bxctl/verify_broker.py",
    "boxmaker/brokerd/amend.py",
    "boxmaker/brokerd/cli.py",
    "boxmaker/brokerd/log.py",
]


@pytest.mark.parametrize("rel", READER_MODULES)
def test_no_reader_of_brokerd_files_opens_one_bare(rel: str) -> None:
    """The files these modules read (grants, decision-log files, brokerd's config) go through
    session.files (open_regular, read_regular): no builtin open() nor Path.open()."""
    root = Path(__file__).resolve().parents[3]
    tree = ast.parse((root / rel).read_text())
    bare = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "open")
            or (
                isinstance(node.func, ast.Attribute)
                and node.func.attr == "open"
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "os")
            )
        )
    ]
    assert bare == [], f"{rel}: a bare open at line(s) {bare}"


@pytest.mark.parametrize("which", ["config", "log"])
def test_brokerd_serve_with_a_fifo_for_its_config_or_log_says_so(
    tmp_path: Path, which: str
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "grants.toml").write_text('[[grant]]\ntool = "read_file"\nmode = "allow"\n')
    config = tmp_path / "brokerd.toml"
    config.write_text(
        "[broker]\n"
        f'socket = "{tmp_path}/b.sock"\nowner_socket = "{tmp_path}/o.sock"\n'
        f'workspace = "{tmp_path}/ws"\ngrants = "{tmp_path}/grants.toml"\n'
        f'home = "{tmp_path}/home"\nlog = "{tmp_path}/decisions.jsonl"\n'
    )
    if which == "config":
        config.unlink()
        os.mkfifo(config)
    else:
        os.mkfifo(tmp_path / "decisions.jsonl")
    argv = [sys.executable, "-m", "boxmaker.brokerd", "serve", "--config", str(config)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_S, check=False)
    assert done.returncode != 0
    said = (done.stdout + done.stderr).strip()
    assert "not a regular file" in said, said
    assert "Traceback" not in said
