"""Every grant rule, on the core alone: parsed arguments in, allow/ask/deny and a reason out."""

from __future__ import annotations

import pytest

from boxmaker.brokerd import grants, policy
from boxmaker.brokerd.grants import GrantsError, Mode, Rule
from boxmaker.brokerd.policy import call_hash
from boxmaker.brokerd.targets import BadTarget, split_path
from boxmaker.brokerd.tools.kind import GrantKind, Tool
from boxmaker.brokerd.tools.table import Family, Table
from boxmaker.proto import ToolResponse, ToolSchema
from tests.support.brokerd.core import WS, always_rule, decide, decision, parse_grants

GRANTS = b"""
[[grant]]
tool = "read_file"
mode = "allow"

[[grant]]
tool = "read_file"
mode = "deny"
paths = ["secret"]

[[grant]]
tool = "write_file"
mode = "allow"
paths = ["out/"]

[[grant]]
tool = "write_file"
mode = "ask"
paths = ["docs"]

[[grant]]
tool = "edit_file"
mode = "deny"

[[grant]]
tool = "note"
mode = "allow"
"""


def rules() -> tuple[Rule, ...]:
    return parse_grants(GRANTS)


@pytest.mark.parametrize(
    ("tool", "path", "mode", "reason"),
    [
        ("read_file", "a.txt", Mode.ALLOW, "grant: read_file allow on a.txt"),
        ("read_file", "secret/key", Mode.DENY, "grant: read_file deny on secret/key"),
        ("read_file", "secret", Mode.DENY, "grant: read_file deny on secret"),
        ("read_file", "secretary/x", Mode.ALLOW, "grant: read_file allow on secretary/x"),
        ("write_file", "out/x", Mode.ALLOW, "grant: write_file allow on out/x"),
        ("write_file", "./out//x", Mode.ALLOW, "grant: write_file allow on out/x"),
        ("write_file", "docs/a.md", Mode.ASK, "grant: write_file ask on docs/a.md"),
        ("write_file", "docs-old/a.md", Mode.DENY, "no grant for write_file covers docs-old/a.md"),
        ("write_file", "a.txt", Mode.DENY, "no grant for write_file covers a.txt"),
        ("edit_file", "out/x", Mode.DENY, "grant: edit_file deny on out/x"),
        ("list_dir", ".", Mode.DENY, "no grant for list_dir: the owner has not granted this tool"),
        ("write_file", WS + "/out/x", Mode.ALLOW, "grant: write_file allow on out/x"),
    ],
)
def test_decision_on_parsed_paths(tool: str, path: str, mode: Mode, reason: str) -> None:
    got = decision(rules(), tool, split_path(path, WS))
    assert (got.mode, got.reason) == (mode, reason)


def test_a_deny_wins_whatever_the_order() -> None:
    flipped = parse_grants(b'[[grant]]\ntool="read_file"\nmode="deny"\npaths=["secret"]\n'
                           b'[[grant]]\ntool="read_file"\nmode="allow"\n')  # fmt: skip
    for rs in (rules(), flipped):
        assert decision(rs, "read_file", ("secret", "k")).mode is Mode.DENY
        assert decision(rs, "read_file", ("open",)).mode is Mode.ALLOW


def test_core_md_is_never_better_than_ask() -> None:
    assert decision(rules(), "note", "notes").mode is Mode.ALLOW
    d = decision(rules(), "note", "core")
    assert d.mode is Mode.ASK
    assert "core.md" in d.reason


def test_note_files_constraint() -> None:
    rs = parse_grants(b'[[grant]]\ntool="note"\nmode="allow"\nfiles=["notes"]\n')
    assert decision(rs, "note", "notes").mode is Mode.ALLOW
    assert decision(rs, "note", "core").mode is Mode.DENY


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "a/../../b",
        "/etc/passwd",
        "/srv/wsx/a",
        "a\nb",
        "a\x00b",
        "a\x7fb",
        "x" * 256,
        "a/" * 2100,
    ],
)
def test_paths_that_are_refused_before_the_kernel_sees_them(path: str) -> None:
    with pytest.raises(BadTarget):
        split_path(path, WS)


def test_an_absolute_path_outside_is_refused_with_the_relative_spelling() -> None:
    """inbox (issue 40): the model sent list_dir "/inbox" for the workspace's inbox/ and, told
    only "give a path inside it", gave up."""
    with pytest.raises(BadTarget, match=f'^/inbox is outside the workspace {WS}; give a path '
                       'inside it, as "inbox"$'):  # fmt: skip
        split_path("/inbox", WS)
    assert split_path("inbox", WS) == ("inbox",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"[[grant]]\ntool='exec'\nmode='allow'\n", "tool must be one of"),
        (b"[[grant]]\ntool='call_tool'\nmode='allow'\n", "tool must be one of"),
        (b"[[grant]]\ntool='read_file'\nmode='yes'\n", "mode must be"),
        (b"[[grant]]\ntool='read_file'\nmode='allow'\npath=['a']\n", "unknown key(s) path"),
        (b"[[grant]]\ntool='read_file'\nmode='allow'\npaths=['../x']\n", "'..'"),
        (b"[[grant]]\ntool='read_file'\nmode='allow'\npaths=['/etc']\n", "relative"),
        (b"[[grant]]\ntool='read_file'\nmode='allow'\npaths=[]\n", "non-empty"),
        (b"[[grant]]\ntool='note'\nmode='allow'\nfiles=['all']\n", "files may hold"),
        (b"[grants]\n", "unknown key(s) grants"),
        (b"[[grant]\n", "not a TOML file"),
    ],
)
def test_bad_grants_are_refused_with_a_reason(text: bytes, message: str) -> None:
    with pytest.raises(GrantsError, match=None) as info:
        parse_grants(text)
    assert message in str(info.value)


def test_always_adds_this_tool_and_this_path_only() -> None:
    rule = always_rule("write_file", ("docs", "a.md"))
    assert rule is not None
    rs = (*rules(), rule)
    assert decision(rs, "write_file", ("docs", "a.md")).mode is Mode.ALLOW  # the exact path
    assert decision(rs, "write_file", ("docs", "b.md")).mode is Mode.ASK  # not its neighbour
    assert decision(rs, "edit_file", ("docs", "a.md")).mode is Mode.DENY  # not another tool
    # the rule "always" added is written back as TOML and reads back the same
    assert parse_grants(rule.to_toml().encode()) == (rule,)


def test_always_never_overrides_a_deny_nor_covers_core_md() -> None:
    rule = always_rule("read_file", ("secret", "k"))
    assert rule is not None
    rs = (*rules(), rule)
    assert decision(rs, "read_file", ("secret", "k")).mode is Mode.DENY
    assert always_rule("note", "core") is None


def test_the_most_specific_rule_decides_between_allow_and_ask() -> None:
    rs = parse_grants(b'[[grant]]\ntool="write_file"\nmode="allow"\n'
                      b'[[grant]]\ntool="write_file"\nmode="ask"\npaths=["etc"]\n')  # fmt: skip
    assert decision(rs, "write_file", ("etc", "x")).mode is Mode.ASK
    assert decision(rs, "write_file", ("src", "x")).mode is Mode.ALLOW


def test_the_call_hash_binds_tool_and_canonical_arguments() -> None:
    a = call_hash("write_file", {"path": "x", "content": "1"})
    assert a == call_hash("write_file", {"content": "1", "path": "x"})  # key order is not meaning
    assert a != call_hash("write_file", {"path": "x", "content": "2"})
    assert a != call_hash("edit_file", {"path": "x", "content": "1"})


def test_decide_refuses_bad_arguments_as_data() -> None:
    assert decide(rules(), "read_file", "not json", WS).decision.mode is Mode.DENY
    d = decide(rules(), "read_file", '{"path": 3}', WS).decision
    assert (d.mode, d.reason) == (Mode.DENY, "bad request: read_file: path must be a string")
    d = decide(rules(), "exec", '{"cmd": "rm"}', WS).decision
    assert d.mode is Mode.DENY
    assert "no tool named" in d.reason
    d = decide(rules(), "read_file", '{"path": "a", "offset": -1}', WS).decision
    # the next step, not a range a small model quotes back as "the file's last byte"
    assert d.reason.endswith("offset cannot be negative (-1); leave offset out for its default")
    d = decide(rules(), "read_file", '{"path": "a", "offset": 4611686018427387905}', WS).decision
    assert d.reason.endswith("offset must be at most 4611686018427387904")


# ---- the table of tools (issue 27): a new tool is one row, a family gives rows at run time -----


def _echo_row(name: str) -> Tool:
    """A tool whose rules name the tool only, that only reads, like an MCP server's might."""
    return Tool(
        ToolSchema(name, "echoes", {"type": "object", "properties": {"text": {"type": "string"}}}),
        {"text": str},
        run=lambda _ctx, _target, args, class_: ToolResponse(args["text"], class_, True, False),
        summary=lambda _ctx, _target, args: f"echo {args['text']}",
        grant=GrantKind.NONE,
        target=lambda _args, _ws: "",
        writes=False,
        untrusted=True,
    )


def test_a_tool_added_as_a_row_is_granted_decided_and_tainted_by_its_row_alone() -> None:
    table = Table()
    table.add(_echo_row("echo"))
    servers = {"files.read": _echo_row("files.read"), "files.send": _echo_row("files.send")}
    table.add_family(Family("files.", servers.get, lambda: list(servers)))
    text = b'[[grant]]\ntool="echo"\nmode="allow"\n[[grant]]\ntool="files.read"\nmode="ask"\n'
    rules = grants.parse_grants(text, table)
    assert [r.tool for r in rules] == ["echo", "files.read"]
    d = policy.decide(table, rules, "echo", '{"text": "hi"}', WS).decision
    assert (d.mode, d.reason) == (Mode.ALLOW, "grant: echo allow on any command")
    assert policy.decide(table, rules, "files.read", "{}", WS).decision.mode is Mode.ASK
    send = policy.decide(table, rules, "files.send", "{}", WS).decision
    assert (send.mode, send.reason) == (
        Mode.DENY,
        "no grant for files.send: the owner has not granted this tool",
    )
    gone = policy.decide(table, rules, "files.gone", "{}", WS).decision
    assert "no tool named 'files.gone'" in gone.reason
    with pytest.raises(GrantsError, match="tool must be one of"):
        grants.parse_grants(b'[[grant]]\ntool="files.gone"\nmode="allow"\n', table)
    with pytest.raises(ValueError, match="overlaps"):
        table.add(_echo_row("files.other"))
    assert "files.send" in table.names()


@pytest.mark.parametrize(
    "path",
    ["secret/k", "./secret/k", "secret//k", "secret/./k", WS + "/secret/k", "secret/k/",
     "//secret/k"],
)  # fmt: skip
def test_a_path_deny_holds_for_every_spelling_of_the_path(path: str) -> None:
    """Paths are compared in the workspace-relative form brokerd opens (issue 27, class 2)."""
    d = decide(rules(), "read_file", f'{{"path": "{path}"}}', WS)
    if path.startswith("//"):  # absolute, and not under the workspace: refused as such
        assert d.decision.reason.startswith("bad path: "), d
    else:
        assert (d.decision.mode, d.target) == (Mode.DENY, ("secret", "k")), d
