"""A switch that cannot complete, and an empty or torn epoch n > 0 (issue 29.2), under `bxctl
verify`, `sessions` and `repair`; and `bxctl repair --unanswered` for a log that one long
message made unusable (29.3). Each state is made with the real store, as an old loopd or a power
cut left it; each command runs in-process through `bxctl`'s main (its streams and exit code).

Before: verify and sessions said ok for the first four shapes while every turn failed, and
repair had nothing to do ("nothing to repair: session verifies") or refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from boxmaker._cli import ExitStatus
from boxmaker.bxctl.cli import main
from boxmaker.proto import Assistant, EpochEnd, Usage, User, encode_line, next_prev
from boxmaker.proto.log import LogRecord
from boxmaker.session.baseline import BASELINE_MAX_BYTES, Baseline
from boxmaker.session.epochs import cut_index
from boxmaker.session.store import SessionStore
from tests.support.cli import run_cli
from tests.support.session.epoch_cases import SYSTEM, T0, T_END, prepared, switch_now


def _end_naming(home: Path, baseline: Baseline | None, epoch: int = 0) -> Path:
    """Appends an epoch_end naming `baseline` (written as the next baseline when given)."""
    folder = home / "sessions" / "s1"
    with SessionStore(home).open("s1") as log:
        n = log.epoch
        keep_from = cut_index(log.records, 1)
        assert keep_from is not None
        named = baseline or Baseline("never written", log.baseline.tools)
        if baseline is not None:
            (folder / f"{n + 1}.baseline.json").write_bytes(baseline.to_bytes())
        log.append(EpochEnd(T_END, n, "summary", keep_from, named.hash, 1, 2, 3))
    return folder


def missing(home: Path) -> None:
    _end_naming(home, None)


def over_bound(home: Path) -> None:
    with SessionStore(home).open("s1") as log:
        tools = log.baseline.tools
    _end_naming(home, Baseline(SYSTEM + "s" * 250_000, tools))


def not_the_one(home: Path) -> None:
    folder = _end_naming(home, None)
    (folder / "1.baseline.json").write_bytes(Baseline("another", ()).to_bytes())


def turns_after_it(home: Path) -> None:
    """What an old loopd left: the epoch_end, then a turn appended after it."""
    folder = _end_naming(home, None)
    log = folder / "0.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    prev, out = next_prev(lines[-1]), bytearray()
    after: list[LogRecord] = [
        User(T0, "after"),
        Assistant(T0, "answered", None, ()),
        Usage(T0, 0, 5, 2, 0, False),
    ]
    for seq, record in enumerate(after, start=len(lines)):
        line = encode_line(record, seq, prev)
        out += line
        prev = next_prev(line)
    log.write_bytes(log.read_bytes() + bytes(out))


def in_epoch_1(home: Path) -> None:
    """The same in epoch 1: its next baseline missing."""
    with SessionStore(home).open("s1") as log:
        switch_now(log)
        for i in range(2):
            log.append(User(T0, f"in epoch 1, {i}"))
            log.append(Assistant(T0, "ok", None, ()))
    _end_naming(home, None)


def empty_epoch_1(home: Path) -> None:
    with SessionStore(home).open("s1") as log:
        switch_now(log)
    (home / "sessions" / "s1" / "1.jsonl").write_bytes(b"")


def torn_epoch_1(home: Path) -> None:
    with SessionStore(home).open("s1") as log:
        switch_now(log)
    path = home / "sessions" / "s1" / "1.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


CASES: list[tuple[Callable[[Path], None], str, int]] = [
    (missing, "1.baseline.json: missing", 0),
    (over_bound, "over its bound", 0),
    (not_the_one, "not the file the epoch_end", 0),
    (turns_after_it, "records after it", 0),
    (in_epoch_1, "2.baseline.json: missing", 1),
    (empty_epoch_1, "1.jsonl: empty of what the switch", 1),
    (torn_epoch_1, "a torn copy", 1),
]


@pytest.mark.parametrize(("make", "says", "epoch"), CASES, ids=[c[0].__name__ for c in CASES])
def test_verify_says_what_is_wrong_and_repair_mends_it(
    tmp_path: Path, make: Callable[[Path], None], says: str, epoch: int
) -> None:
    home = tmp_path / "home"
    prepared(home, "s1")
    make(home)
    verify = run_cli(main, ["verify", "s1", "--home", str(home)])
    assert verify.status == ExitStatus.ERROR, verify
    assert says in verify.stderr + verify.stdout, verify
    assert "bxctl repair s1" in verify.stderr + verify.stdout, verify
    listed = run_cli(main, ["sessions", "--home", str(home), "--json"])
    rows = [orjson.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    text = listed.stdout
    assert "s1" in text, rows
    assert '"ok":false' in text.replace(" ", ""), rows
    repaired = run_cli(main, ["repair", "s1", "--home", str(home)])
    assert repaired.status == ExitStatus.OK, repaired
    assert repaired.stdout.startswith("repaired: session s1"), repaired
    again = run_cli(main, ["verify", "s1", "--home", str(home)])
    assert again.status == ExitStatus.OK, again
    with SessionStore(home).open("s1") as log:  # the next turn works
        assert log.epoch == epoch
        log.append(User(T0, "the next turn"))
    assert (home / "sessions" / "s1").stat()  # nothing was lost: the original is kept
    kept = [p.name for p in (home / "sessions" / "s1").iterdir() if "-2" in p.name]
    assert kept, "the original is kept beside the log"


def test_a_committed_switch_that_can_roll_forward_is_ok(tmp_path: Path) -> None:
    """A crash between the commit point and the next log: verify ok, the next open rolls it."""
    home = tmp_path / "home"
    prepared(home, "s1")
    with SessionStore(home).open("s1") as log:
        tools = log.baseline.tools
    _end_naming(home, Baseline(SYSTEM + " folded", tools))
    assert run_cli(main, ["verify", "s1", "--home", str(home)]).status == ExitStatus.OK
    assert run_cli(main, ["repair", "s1", "--home", str(home)]).stdout.startswith("nothing")
    with SessionStore(home).open("s1") as log:
        assert log.epoch == 1


@pytest.mark.parametrize("unanswered", [1, 2, 5])
@pytest.mark.parametrize("size", [100_000, 1_000_000])
def test_repair_unanswered_takes_the_long_messages_off(
    tmp_path: Path, unanswered: int, size: int
) -> None:
    """An old log: a long message appended, then every later turn's message too, none answered
    (each failed session_full). `--unanswered` takes them off; the answered turns stay."""
    home = tmp_path / "home"
    prepared(home, "s1")
    log_path = home / "sessions" / "s1" / "0.jsonl"
    answered = log_path.read_bytes()
    with SessionStore(home).open("s1") as log:
        log.append(User(T0, "x" * size))
        for i in range(unanswered - 1):
            log.append(User(T0, f"hello? {i}"))
    r = run_cli(main, ["repair", "s1", "--home", str(home), "--unanswered"])
    assert r.status == ExitStatus.OK, r
    assert "unanswered" in r.stdout
    assert log_path.read_bytes() == answered
    kept = [p for p in log_path.parent.iterdir() if ".unanswered-" in p.name]
    assert len(kept) == 1
    assert kept[0].stat().st_size > size
    r = run_cli(main, ["repair", "s1", "--home", str(home), "--unanswered"])
    assert r.status == ExitStatus.ERROR
    assert "nothing was changed" in r.stderr


def test_over_bound_is_bigger_than_the_bound() -> None:
    assert len(Baseline(SYSTEM + "s" * 250_000, ()).to_bytes()) > BASELINE_MAX_BYTES
