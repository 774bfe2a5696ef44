"""brokerd's decision log: hash-chained, verified by `brokerd verify`, and a replay of it makes
every decision again; a kill -9 mid-call leaves a log that verifies and a brokerd that restarts."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.cli import main
from boxmaker.brokerd.policy import LogError
from boxmaker.bxctl.cli import main as bxctl
from boxmaker.proto.decision import Start
from boxmaker.session.chain import verify_chain
from tests.support.brokerd.approvals import ASK_WRITES, Call
from tests.support.brokerd.core import replay
from tests.support.brokerd.log import busy_log, rechain
from tests.support.brokerd.rig import Rig
from tests.support.cli import run_cli


def test_a_busy_log_verifies_and_replays(rig: Rig) -> None:
    busy_log(rig)
    records, _ = verify_chain(rig.log.read_bytes())
    kinds = [r["type"] for r in records]
    assert kinds.count("decision") == 8
    assert kinds.count("approval") == 3
    assert kinds.count("grant") == 1
    assert replay(rig.log.read_bytes()) == 11
    out = run_cli(main, ["verify", "--log", str(rig.log)])
    assert out.status == 0
    assert "11 decision(s) replay the same" in out.stdout
    chained = run_cli(bxctl, ["verify-broker", rig.log])
    assert chained.status == 0
    assert (
        "ok: 25 lines chained (3 approval, 8 decision, 1 grant, 8 request, 4 result, 1 start)"
        in (chained.stdout)
    )


def test_a_decision_rewritten_with_the_chain_recomputed_fails_the_replay(rig: Rig) -> None:
    busy_log(rig)
    records, _ = verify_chain(rig.log.read_bytes())
    denied = next(r for r in records if r["type"] == "decision" and r["mode"] == "deny")
    denied["mode"] = "allow"
    forged = rechain(records)
    verify_chain(forged)  # the chain holds...
    with pytest.raises(LogError, match="replay decides deny"):  # ...the replay does not
        replay(forged)


def test_an_approval_forged_into_the_log_fails_the_replay(rig: Rig) -> None:
    busy_log(rig)
    records, _ = verify_chain(rig.log.read_bytes())
    refused = next(r for r in records if r["type"] == "approval" and r["answer"] == "no")
    refused["mode"] = "allow"
    out_of_chain = rig.log.read_bytes().replace(
        b'"answer":"no","mode":"deny"', b'"answer":"no","mode":"allow"'
    )
    for data in (rechain(records), out_of_chain):
        with pytest.raises(LogError, match="line"):
            replay(data)
    rig.log.write_bytes(out_of_chain)
    out = run_cli(main, ["verify", "--log", str(rig.log)])
    assert out.status == 1
    assert "the log was edited or reordered" in out.stderr
    chained = run_cli(bxctl, ["verify-broker", rig.log])
    assert chained.status == 1
    assert "REFUSED: decisions.jsonl line" in chained.stdout


def test_kill_9_mid_call_then_restart(rig: Rig) -> None:
    rig.grants_text = ASK_WRITES
    rig.start()
    call = Call(rig, "write_file", {"path": "a.txt", "content": "x"})
    call.wait_needed()  # held for the owner: brokerd is mid-call
    assert rig.daemon is not None
    rig.daemon.send_signal(signal.SIGKILL)
    rig.daemon.wait()
    call.join(10)
    assert [f.kind for f in call.frames] == ["approval_needed"]  # no result, and no write
    assert not (rig.workspace / "a.txt").exists()
    rig.daemon = None
    assert replay(rig.log.read_bytes()) == 1  # the decision to ask; no approval was logged
    rig.start()  # the stale sockets are replaced; the log is continued, not restarted
    assert rig.call("read_file", {"path": "nothing"})["content"].startswith("error: ")
    rig.stop()
    records, _ = verify_chain(rig.log.read_bytes())
    assert [r["type"] for r in records].count("start") == 2
    assert replay(rig.log.read_bytes()) == 2
    assert orjson.loads(rig.log.read_bytes().splitlines()[0])["type"] == "start"


def test_the_log_has_one_writer_and_a_torn_last_line_is_cut(tmp_path: Path) -> None:
    from boxmaker.brokerd.log import DecisionLog

    path = str(tmp_path / "d.jsonl")
    log = DecisionLog(path)
    log.append(Start, grants="", workspace="/w")
    with pytest.raises(LogError, match="another brokerd holds this log"):
        DecisionLog(path)
    log.close()
    whole = (tmp_path / "d.jsonl").read_bytes()
    (tmp_path / "d.jsonl").write_bytes(whole + b'{"type":"request","seq":1,')  # killed mid-write
    again = DecisionLog(path)
    again.append(Start, grants="", workspace="/w")
    again.close()
    records, _ = verify_chain((tmp_path / "d.jsonl").read_bytes())
    assert [r["seq"] for r in records] == [0, 1]
