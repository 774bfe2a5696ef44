"""The decision log's records are typed (boxmaker/proto/decision.py) and checked by the one
chain walk the session log uses (proto/chain.py): a line whose chain is intact but whose record
is not one brokerd writes (a field of the wrong type, missing, extra, an unknown kind, a
non-canonical spelling) is refused by `brokerd verify` and `bxctl verify-broker`, naming it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from boxmaker.brokerd.cli import main
from boxmaker.bxctl.cli import main as bxctl
from boxmaker.proto.decision import RECORD_TYPES
from boxmaker.session.chain import verify_chain
from tests.support.brokerd.log import busy_log, rechain
from tests.support.brokerd.rig import Rig
from tests.support.cli import run_cli


def first(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(r for r in records if r["type"] == kind)


Edit = Callable[[dict[str, Any]], object]
EDITS: dict[str, tuple[str, Edit, str]] = {
    "epoch as a string": ("request", lambda r: r.update(epoch="0"), "epoch"),
    "chars negative": ("result", lambda r: r.update(chars=-1), "chars"),
    "a missing field": ("decision", lambda r: r.pop("reason"), "reason"),
    "an extra field": ("approval", lambda r: r.update(approved_by="loopd"), "approved_by"),
    "untrusted as 0": ("result", lambda r: r.update(untrusted=0), "untrusted"),
    "an unknown kind": ("grant", lambda r: r.update(type="grant_all"), "grant_all"),
    "a bad time": ("start", lambda r: r.update(time="yesterday"), "time"),
}


@pytest.mark.parametrize("name", EDITS)
def test_a_record_brokerd_does_not_write_is_refused(rig: Rig, name: str) -> None:
    kind, edit, named = EDITS[name]
    busy_log(rig)
    records, _ = verify_chain(rig.log.read_bytes())
    edit(first(records, kind))
    rig.log.write_bytes(rechain(records))  # the chain is whole again: only the type is wrong
    out = run_cli(main, ["verify", "--log", str(rig.log)])
    assert out.status == 1
    assert named in out.stderr, out.stderr
    chained = run_cli(bxctl, ["verify-broker", rig.log])
    assert chained.status == 1
    assert named in chained.stdout


def test_every_kind_brokerd_writes_is_typed(rig: Rig) -> None:
    busy_log(rig)
    records, _ = verify_chain(rig.log.read_bytes())
    assert {r["type"] for r in records} <= set(RECORD_TYPES)
