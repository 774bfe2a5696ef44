"""Issue 38 items 4 and 5: the rotation's carry holds only what decides (tainted sessions and
their trusted hosts, the calls in flight), bounded, aging out; its shape is checked at start
and by verify; an old log over the bound is rotated at start, not refused.

An in-process Broker (the real decide, log and ledger; no sockets) with the smallest bound,
its log on /dev/shm where there is one (1,500 sessions are 4,500 fsyncs)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.cli import main
from boxmaker.brokerd.ledger import MAX_CARRY_BYTES
from boxmaker.brokerd.log import LogError
from boxmaker.proto.decision import Request, Start
from boxmaker.proto.hash import sha256_hex
from boxmaker.session.chain_files import archives
from tests.support.brokerd.log import ROTATE, config
from tests.support.brokerd.rig import Rig
from tests.support.cli import run_cli


@pytest.fixture
def broker(base: Path) -> Iterator[Broker]:
    b = Broker(config(base))
    try:
        yield b
    finally:
        b.close()


def read(b: Broker, session: str) -> str:
    return b.call("read_file", orjson.dumps({"path": "page.txt"}).decode(), _no, session).content


def write(b: Broker, session: str) -> str:
    args = orjson.dumps({"path": "out.txt", "content": "x"}).decode()
    return b.call("write_file", args, _no, session).content


def _no(held: object, brief: str) -> None:
    return None


def verified(log: str) -> str:
    out = run_cli(main, ["verify", "--log", log])
    assert out.status == 0, out.stdout + out.stderr
    return out.stdout


def carry_of(log: str) -> dict:  # type: ignore[type-arg]
    first = orjson.loads(Path(log).read_bytes().split(b"\n", 1)[0])
    assert first["type"] == "carry"
    return first  # type: ignore[no-any-return]


@pytest.mark.parametrize("tainted", [False, True])
def test_1500_sessions_do_not_make_every_line_rotate(broker: Broker, tainted: bool) -> None:
    (Path(broker.config.workspace) / "page.txt").write_text("words")
    for i in range(1500):
        if tainted:
            assert "words" in read(broker, f"session-{i:04d}")  # read_file: untrusted
        else:
            write(broker, f"session-{i:04d}")
    log = broker.config.log
    files = archives(log)
    written = sum(os.path.getsize(f) for f in [*files, log])
    assert len(files) <= written // ROTATE + 1, (len(files), written)  # not a file a line
    carry = carry_of(log)
    assert len(orjson.dumps(carry["ledger"])) <= MAX_CARRY_BYTES
    if not tainted:
        assert carry["ledger"]["tainted"] == {}  # an untainted session carries nothing
    else:
        assert carry["ledger"]["tainted"]  # the most recently seen, to the bound
    assert carry["ledger"]["open"] == {}
    verified(log)


def test_a_taint_outlives_a_rotation_and_a_restart_and_replays(base: Path) -> None:
    b = Broker(config(base))
    (Path(b.config.workspace) / "page.txt").write_text("words")
    read(b, "t")
    while len(archives(b.config.log)) < 2:
        write(b, "busy")
    assert "t" in carry_of(b.config.log)["ledger"]["tainted"]
    b.close()
    b = Broker(config(base))
    try:
        assert "asks because the session read untrusted content from read_file" in write(b, "t")
        verified(b.config.log)
    finally:
        b.close()


def test_a_call_in_flight_at_a_kill_is_not_carried_after_the_next_start(base: Path) -> None:
    b = Broker(config(base))
    b.log.append(Request, "dead", "s", 0, "read_file", "{}", "{}", "0" * 64)
    b.close()  # killed before its decision: no result will ever come
    b = Broker(config(base))  # its start line: the calls of the brokerd before are over
    try:
        while len(archives(b.config.log)) < 1:
            write(b, "busy")
        assert carry_of(b.config.log)["ledger"]["open"] == {}
    finally:
        b.close()


def rechain(path: Path, edit: dict) -> None:  # type: ignore[type-arg]
    """The current file's carry line edited (`edit` over its ledger), every line after it
    chained again: what an editor with the chain's code makes."""
    lines = path.read_bytes().splitlines(keepends=True)
    prev = orjson.loads(lines[0])["prev"]
    out = []
    for n, line in enumerate(lines):
        obj = orjson.loads(line)
        if n == 0:
            obj["ledger"] = edit
        obj["prev"] = prev
        new = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
        out.append(new)
        prev = sha256_hex(new)
    path.write_bytes(b"".join(out))


BAD_CARRIES: dict[str, dict[str, Any]] = {
    "empty": {},
    "sessions missing": {"calls": {}, "open": {}},
    "a taint of the wrong shape": {"v": 2, "tainted": {"s": [1, "x"]}, "open": {}},
    "open not an object": {"v": 2, "tainted": {}, "open": []},
    "another version": {"v": 3, "tainted": {}, "open": {}},
    "untainted": {"v": 2, "tainted": {}, "open": {}},  # the right shape, a taint dropped
}


@pytest.mark.parametrize("bad", BAD_CARRIES)
def test_an_edited_carry_fails_verify_in_one_line_and_brokerd_refuses_clearly(
    base: Path, bad: str
) -> None:
    b = Broker(config(base))
    (Path(b.config.workspace) / "page.txt").write_text("words")
    read(b, "t")
    while len(archives(b.config.log)) < 1:
        write(b, "busy")
    write(b, "busy")
    b.close()
    log = Path(b.config.log)
    rechain(log, BAD_CARRIES[bad])
    out = run_cli(main, ["verify", "--log", str(log)])
    assert out.status != 0
    said = (out.stdout + out.stderr).strip()
    assert "decisions.jsonl line 1:" in said, said
    assert len(said.splitlines()) == 1
    assert "KeyError" not in said
    if bad != "untainted":
        with pytest.raises(LogError, match=r"decisions\.jsonl: line 1: the carry's ledger"):
            Broker(config(base))


def test_an_old_log_over_the_bound_is_rotated_at_start(base: Path) -> None:
    """A log written before rotation existed (one file far over what brokerd reads at start):
    brokerd starts, rotating it at once, and its taints are carried."""
    b = Broker(config(base, rotate=1 << 30))
    (Path(b.config.workspace) / "page.txt").write_text("words")
    read(b, "t")
    for _ in range(70):  # 7 MB of start lines: over 64 KiB + a line + a carry
        b.log.append(Start, grants="#" * 100_000 + "\n", workspace=b.config.workspace)
    b.close()
    size = os.path.getsize(b.config.log)
    assert size > ROTATE + (4 << 20) + MAX_CARRY_BYTES + 4096
    b = Broker(config(base))  # 64 KiB now: before, "raise log_rotate_bytes to open it"
    try:
        assert [Path(f).name for f in archives(b.config.log)] == ["decisions.jsonl.1"]
        assert os.path.getsize(archives(b.config.log)[0]) == size
        assert "t" in carry_of(b.config.log)["ledger"]["tainted"]
        assert "asks because the session read untrusted content from read_file" in write(b, "t")
        verified(b.config.log)
    finally:
        b.close()


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_hangup_stops_brokerd_cleanly(rig: Rig, signum: int) -> None:
    """SIGHUP (log rotators, supervisorctl) is a stop as SIGTERM is: exit 0, "stopped", the
    log whole, and the next start opens it."""
    rig.start()
    assert rig.daemon is not None
    rig.call("read_file", {"path": "missing.txt"})
    assert rig.daemon.stop(signum) == 0
    assert rig.daemon.count_lines("stopped") == 1
    rig.start()
    rig.stop()
    verified(str(rig.log))
