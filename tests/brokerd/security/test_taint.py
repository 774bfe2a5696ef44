"""Taint from the decision records: the rules on hand-made histories, then properties over random
ones (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.brokerd import taint as taint_mod
from boxmaker.brokerd.ledger import Ledger
from boxmaker.brokerd.taint import Record, Taint, taint_of
from boxmaker.brokerd.tools.kind import GrantKind
from boxmaker.brokerd.tools.table import TABLE
from boxmaker.proto.decision import Logged, Request, Result

WRITERS = ("write_file", "edit_file", "note", "shell", "some_new_tool")
READ_ONLY = tuple(t.name for t in TABLE.tools() if not t.writes)


def must_ask(taint: Taint | None, name: str, host: str | None = None) -> str | None:
    """taint.must_ask with the tool's row (a name the table lacks counts as a writer)."""
    row = TABLE.get(name)
    writes = True if row is None else row.writes
    hosts = row is not None and row.grant is GrantKind.HOSTS
    return taint_mod.must_ask(taint, name, writes, host if hosts else None)


def test_the_table_says_which_tools_only_read() -> None:
    assert set(READ_ONLY) == {"clock", "read_file", "list_dir", "find_files"}


def test_a_clean_history_is_not_tainted_and_asks_nothing() -> None:
    records = [Record(1, "read_file"), Record(2, "fetch", False, "a.org"), Record(3, "list_dir")]
    assert taint_of(records) is None
    for tool in (*WRITERS, "fetch"):
        assert must_ask(None, tool, "b.org") is None


def test_the_first_untrusted_result_taints_and_every_writer_asks_naming_it() -> None:
    records = [
        Record(1, "fetch", False, "docs.example"),
        Record(2, "fetch", True, "evil.example"),
        Record(3, "shell", True),
    ]
    taint = taint_of(records)
    assert taint == Taint(2, "fetch of evil.example", frozenset({"docs.example"}))
    for tool in WRITERS:
        reason = must_ask(taint, tool)
        assert reason is not None
        assert "untrusted content from fetch of evil.example at call 2" in reason
        assert tool in reason
    for tool in READ_ONLY:
        assert must_ask(taint, tool) is None


def test_a_fetch_asks_unless_its_host_was_fetched_before_the_taint() -> None:
    taint = taint_of([Record(1, "fetch", False, "Docs.Example"), Record(2, "shell", True)])
    assert must_ask(taint, "fetch", "docs.example") is None
    reason = must_ask(taint, "fetch", "evil.example")
    assert reason is not None
    assert reason.startswith("fetch of evil.example asks because the session read untrusted")
    assert "from shell at call 2" in reason
    assert must_ask(taint, "fetch", None) is not None


def test_the_tainting_host_is_not_trusted_after_it() -> None:
    """The page that tainted the session may tell the model to send data back to its own host."""
    taint = taint_of([Record(1, "fetch", True, "evil.example")])
    assert taint is not None
    assert must_ask(taint, "fetch", "evil.example") is not None


def test_a_denied_fetch_fetched_nothing() -> None:
    taint = taint_of([Record(1, "fetch", False, None), Record(2, "shell", True)])
    assert taint is not None
    assert taint.trusted_hosts == frozenset()


def test_a_taint_carried_from_the_last_epoch_holds() -> None:
    carried = Taint(3, "fetch of evil.example", frozenset(), carried=True, epoch=0)
    taint = taint_of([Record(1, "read_file")], carried)
    reason = must_ask(taint, "write_file")
    assert reason is not None
    assert "from fetch of evil.example at call 3 in epoch 0 (the summary carries it" in reason


T = "2026-12-02T12:00:00.000Z"


def _request(call_id: str, session: str, epoch: int, tool: str) -> Logged:
    return Logged(0, Request(T, call_id, session, epoch, tool, "{}", "{}", "0" * 64))


def _result(call_id: str, untrusted: bool, host: str | None = None) -> Logged:
    return Logged(0, Result(T, call_id, False, False, 0, untrusted, host, "public"))


@pytest.mark.parametrize("claimed", [0, 1, 2, 7])
def test_no_epoch_a_call_claims_sheds_the_taint(claimed: int) -> None:
    ledger = Ledger()
    ledger.feed(_request("a", "s", 1, "fetch"))
    ledger.feed(_result("a", False, "docs.org"))
    ledger.feed(_request("b", "s", 1, "read_file"))
    ledger.feed(_result("b", True))
    assert ledger.taint("other", claimed) is None  # another session is not touched
    taint = ledger.taint("s", claimed)  # higher, lower or the same epoch: still tainted
    assert taint is not None
    assert (taint.seq, taint.source, taint.epoch) == (2, "read_file", 1)
    assert taint.trusted_hosts == frozenset({"docs.org"})
    assert taint.carried is (claimed != 1)
    reason = must_ask(taint, "write_file")
    assert reason is not None
    if claimed != 1:
        assert "at call 2 in epoch 1 (the summary carries it into later epochs)" in reason
    else:
        assert reason.endswith("from read_file at call 2; write_file can write or send")


def test_calls_are_numbered_per_session_across_epochs() -> None:
    ledger = Ledger()
    for n, epoch in enumerate([0, 0, 1], start=1):
        ledger.feed(_request(str(n), "s", epoch, "list_dir"))
        ledger.feed(_result(str(n), n == 3))
    taint = ledger.taint("s", 1)
    assert taint is not None
    assert (taint.seq, taint.epoch, taint.carried) == (3, 1, False)


TOOLS = st.sampled_from(["read_file", "list_dir", "fetch", "shell", "write_file", "note"])
HOSTS = st.sampled_from(["a.org", "b.org", "c.org", None])


@st.composite
def histories(draw: st.DrawFn) -> list[Record]:
    steps = draw(st.lists(st.tuples(TOOLS, st.booleans(), HOSTS), max_size=30))
    return [
        Record(seq, tool, untrusted, host if tool == "fetch" else None)
        for seq, (tool, untrusted, host) in enumerate(steps, start=1)
    ]


@given(histories())
def test_tainted_exactly_from_the_first_untrusted_record(records: list[Record]) -> None:
    taint = taint_of(records)
    first = next((r for r in records if r.untrusted), None)
    if first is None:
        assert taint is None
    else:
        assert taint is not None
        assert taint.seq == first.seq
        before = {r.fetched_host for r in records if r.seq < first.seq and r.tool == "fetch"}
        assert taint.trusted_hosts == frozenset(h for h in before if h)


@given(histories(), histories())
def test_a_taint_never_goes_away_or_moves_as_the_history_grows(
    head: list[Record], tail: list[Record]
) -> None:
    start = len(head)
    grown = [*head, *(Record(r.seq + start, r.tool, r.untrusted, r.fetched_host) for r in tail)]
    before = taint_of(head)
    if before is not None:
        assert taint_of(grown) == before
    assert taint_of(grown) == taint_of(list(grown))  # replay gives the same answer


@given(histories(), st.sampled_from([*WRITERS, *READ_ONLY, "fetch"]), HOSTS)
def test_a_call_asks_iff_tainted_and_it_can_write_or_send(
    records: list[Record], tool: str, host: str | None
) -> None:
    taint = taint_of(records)
    reason = must_ask(taint, tool, host)
    if (
        taint is None
        or tool in READ_ONLY
        or (tool == "fetch" and host is not None and host in taint.trusted_hosts)
    ):
        assert reason is None
    else:
        assert reason is not None
        assert f"at call {taint.seq}" in reason
        assert "untrusted content from" in reason


@pytest.mark.parametrize("tool", WRITERS)
def test_unknown_and_writing_tools_are_not_read_only(tool: str) -> None:
    assert tool not in READ_ONLY


def test_the_carry_holds_the_log_seq_of_a_tainted_sessions_last_request() -> None:
    """The carry ages out the least recently seen tainted sessions first: seen is the request
    line's own seq, as the typed line gives it."""
    ledger = Ledger()
    for seq, session in [(7, "old"), (9, "new")]:
        ledger.feed(Logged(seq, Request(T, session, session, 0, "read_file", "{}", "{}", "0" * 64)))
        ledger.feed(_result(session, True))
    tainted = ledger.snapshot()["tainted"]
    assert list(tainted) == ["new", "old"]
    assert [tainted["new"][4], tainted["old"][4]] == [9, 7]
