"""`brokerd verify` decides MCP calls again, from the row facts their request lines carry, with
no server started: a log edited with its chain recomputed fails wherever a decision no longer
follows from the grants, the call, the taint and the facts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.brokerd.cli import main as brokerd_main
from boxmaker.brokerd.policy import call_hash
from boxmaker.session.chain import verify_chain
from tests.support.brokerd.log import forged
from tests.support.brokerd.mcp.git import GIT, make_repo
from tests.support.brokerd.mcp.servers import (
    broker_for,
    mcp_rig,
    nobody_answers,
    python_server,
    sandbox_owned,
)
from tests.support.cli import run_cli

GRANTS = """
[[grant]]
tool = "git.git_status"
mode = "allow"
args = { repo_path = { paths = ["repo"] } }

[[grant]]
tool = "git.git_status"
mode = "deny"
args = { repo_path = { paths = ["secret"] } }
"""
CALLS = [  # session, repo_path: what each decides
    ("s1", "repo"),  # allow; its result is untrusted, so s1 is tainted
    ("s1", "/workspace/repo"),  # ask (the taint), unanswered
    ("s2", "secret"),  # deny
    ("s3", ""),  # ask: no rule covers the workspace itself
    ("s4", 3),  # deny: bad request (the argument's type)
]
Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def log() -> Iterator[bytes]:
    with mcp_rig() as rig:
        make_repo(rig.workspace / "repo", "a.txt")
        (rig.workspace / "secret").mkdir()
        sandbox_owned(rig.workspace)
        servers = python_server("git", "mcp_server_git", workspace="ro", env=GIT)
        b = broker_for(rig, servers, GRANTS)
        try:
            for session, path in CALLS:
                args = orjson.dumps({"repo_path": path}).decode()
                b.call("git.git_status", args, nobody_answers, session=session)
        finally:
            b.close()
        yield Path(b.config.log).read_bytes()


def verify(tmp_path: Path, data: bytes) -> tuple[int, str]:
    path = tmp_path / "decisions.jsonl"
    path.write_bytes(data)
    out = run_cli(brokerd_main, ["verify", "--log", str(path)])
    return out.status, out.stdout + out.stderr


def of(records: Records, kind: str, session: str | None = None) -> Records:
    ids = {r["id"] for r in records if r["type"] == "request" and session in (None, r["session"])}
    return [r for r in records if r["type"] == kind and r.get("id") in ids]


def test_every_mcp_decision_is_decided_again(log: bytes, tmp_path: Path) -> None:
    records, _ = verify_chain(log)
    assert [d["mode"] for d in of(records, "decision")] == ["allow", "ask", "deny", "ask", "deny"]
    facts = of(records, "request")[0]["row"]
    assert facts == {
        "types": {"repo_path": "string"},
        "required": ["repo_path"],
        "cwd": "/workspace",
        "writes": True,
        "untrusted": True,
        "workspace": "ro",
    }
    status, said = verify(tmp_path, log)
    assert status == 0, said
    assert "7 decision(s) replay the same\n" in said  # 5 decisions, 2 approvals
    assert "not decided again" not in said


def _decision(session: str, mode: str, nth: int = 0) -> Callable[[Records], None]:
    def edit(records: Records) -> None:
        of(records, "decision", session)[nth]["mode"] = mode

    return edit


def _untrusted_off(records: Records) -> None:
    of(records, "result", "s1")[0]["untrusted"] = False


def _reads_only(records: Records) -> None:
    of(records, "request", "s1")[1]["row"]["writes"] = False


def _facts(value: Any) -> Callable[[Records], None]:
    def edit(records: Records) -> None:
        of(records, "request", "s3")[0]["row"] = value

    return edit


def _no_deny_rule(records: Records) -> None:
    start = next(r for r in records if r["type"] == "start")
    start["grants"] = GRANTS[: GRANTS.index("[[grant]]", 2)]


def _secret_made_repo(records: Records) -> None:
    req = of(records, "request", "s2")[0]
    req["arguments"] = req["canonical"] = '{"repo_path":"repo"}'
    req["hash"] = call_hash("git.git_status", {"repo_path": "repo"})


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_decision("s2", "allow"), "replay decides deny"),  # a denied call made allowed
        (_decision("s1", "allow", 1), "replay decides ask"),  # the taint's ask dropped
        (_decision("s3", "allow"), "replay decides ask"),  # an uncovered call made allowed
        (_untrusted_off, "replay decides allow"),  # the taint's source hidden
        (_reads_only, "replay decides allow"),  # the row's facts edited alone
        (_no_deny_rule, "replay decides ask"),  # the grants edited
        (_secret_made_repo, "replay decides allow"),  # the arguments edited, hash and all
        (_facts({"types": 3}), "the row facts logged for git.git_status are not"),
        (_facts({}), "the row facts logged for git.git_status are not"),
    ],
)
def test_a_forged_mcp_line_fails_verify(
    log: bytes, tmp_path: Path, edit: Callable[[Records], None], says: str
) -> None:
    data = forged(log, edit)
    verify_chain(data)  # the chain holds...
    status, said = verify(tmp_path, data)
    assert status == 1, said  # ...the replay does not
    assert "verify: FAILED: decisions.jsonl line" in said
    assert says in said, said


def test_a_log_without_row_facts_still_verifies(log: bytes, tmp_path: Path) -> None:
    """A log from before the facts were written: its MCP calls are counted, not decided."""

    def old(records: Records) -> None:
        for r in of(records, "request"):
            del r["row"]
        for r in records:
            if r["type"] == "start":
                del r["rows"]  # nor the start line saying they are

    status, said = verify(tmp_path, forged(log, old))
    assert status == 0, said
    assert "2 decision(s) replay the same; 5 MCP call(s) not decided again" in said


def test_a_schema_refusal_is_counted_not_decided(log: bytes, tmp_path: Path) -> None:
    """The log holds the arguments' types, not the server's schema: a `bad request` deny that
    only the schema could give is counted as not decided again (docs/mcp.md, Known limits)."""

    def refused(records: Records) -> None:
        d = of(records, "decision", "s3")[0]
        d["mode"], d["reason"] = "deny", "bad request: git.git_status: '' is too short"
        records.remove(of(records, "approval", "s3")[0])

    status, said = verify(tmp_path, forged(log, refused))
    assert status == 0, said
    assert "5 decision(s) replay the same; 1 MCP call(s) not decided again" in said


@pytest.mark.parametrize(("session", "nth"), [("s1", 0), ("s1", 1), ("s3", 0)])
@pytest.mark.parametrize("then", ["as logged", "allow"])
def test_a_new_log_whose_mcp_request_lost_its_row_fails_verify(
    log: bytes, tmp_path: Path, session: str, nth: int, then: str
) -> None:
    """Issue 37 item 10: the row deleted (and an allow forged after it): the start line says
    every MCP request carries one, so only a refusal may follow a request without it."""

    def edit(records: Records) -> None:
        del of(records, "request", session)[nth]["row"]
        if then == "allow":
            of(records, "decision", session)[nth]["mode"] = "allow"

    status, said = verify(tmp_path, forged(log, edit))
    assert status == 1, said
    assert "an MCP request without its row" in said, said
    assert "decisions.jsonl line" in said
