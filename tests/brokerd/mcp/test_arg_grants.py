"""Argument constraints in MCP grants: parsed strictly, and decided on each string argument
normalised once, as the built-in tools normalise theirs (the rows of real servers: the git
server's `repo_path` is a path, the fetch server's `url` a URL)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from boxmaker.brokerd.grants import GrantsError, Mode, Rule, parse_grants
from boxmaker.brokerd.ledger import rule_from_json
from boxmaker.brokerd.mcp.rows import families, grant_only_row
from boxmaker.brokerd.policy import decide, listed
from boxmaker.brokerd.targets import string_fields
from boxmaker.brokerd.tools.kind import Tool
from boxmaker.brokerd.tools.table import BUILTIN, Table
from tests.support.brokerd.mcp.git import GIT
from tests.support.brokerd.mcp.servers import mcp_rig, python_server

RULES = b"""
[[grant]]
tool = "git.git_status"
mode = "allow"
args = { repo_path = { paths = ["repo"] } }

[[grant]]
tool = "git.git_status"
mode = "deny"
args = { repo_path = { paths = ["secret"] } }

[[grant]]
tool = "web.fetch"
mode = "allow"
args = { url = { hosts = ["docs.python.org"] } }

[[grant]]
tool = "web.fetch"
mode = "deny"
args = { url = { hosts = ["evil.example"] } }
"""


@pytest.fixture(scope="module")
def table() -> Iterator[Table]:
    """git and fetch, listed (started once for the module)."""
    with mcp_rig() as rig:
        servers = {
            **python_server("git", "mcp_server_git", workspace="ro", env=GIT),
            **python_server("web", "mcp_server_fetch", "--ignore-robots-txt"),
        }
        t = Table(BUILTIN, families(rig.manager(servers), lambda _ctx: 0))
        assert t.get("git.git_status") is not None
        assert t.get("web.fetch") is not None
        yield t


def _decide(table: Table, rules: bytes, tool: str, args: dict[str, object]) -> tuple[Mode, str]:
    d = decide(table, parse_grants(rules, table), tool, orjson.dumps(args).decode(), "/ws")
    return d.decision.mode, d.decision.reason


@pytest.mark.parametrize(
    ("repo_path", "mode"),
    [
        ("repo", Mode.ALLOW),
        ("/workspace/repo", Mode.ALLOW),  # where the server sees the workspace
        ("/workspace//repo/./sub/", Mode.ALLOW),
        ("./repo", Mode.ALLOW),  # relative: from the server's cwd, /workspace
        ("repo-old", Mode.ASK),  # components, not characters: "repo" does not cover it
        ("", Mode.ASK),  # the workspace itself: neither rule covers it, so it asks
        ("secret", Mode.DENY),
        ("/workspace/secret/x", Mode.DENY),
        # not normalisable: never allowed, always denied where a deny names the argument
        ("repo/../secret", Mode.DENY),
        ("/workspace/../etc", Mode.DENY),
        ("//workspace/repo", Mode.DENY),  # not /workspace: outside it
        ("/workspacerepo", Mode.DENY),
        ("/etc/passwd", Mode.DENY),
        ("repo\u0000", Mode.DENY),
        ("repo\nx", Mode.DENY),
        ("~/repo", Mode.DENY),  # a server may expanduser() it
    ],
)
def test_a_path_argument(table: Table, repo_path: str, mode: Mode) -> None:
    got, why = _decide(table, RULES, "git.git_status", {"repo_path": repo_path})
    assert got is mode, why


@pytest.mark.parametrize("repo_path", ["repo/../secret", "/workspace/../etc", "repo\u0000", "~/x"])
def test_a_value_that_cannot_be_normalised_never_allows(table: Table, repo_path: str) -> None:
    allow_only = RULES.split(b"[[grant]]")[1]
    got, why = _decide(table, b"[[grant]]" + allow_only, "git.git_status", {"repo_path": repo_path})
    assert got is Mode.ASK, why  # no rule covers it: an MCP tool asks
    assert "no grant for git.git_status covers this call" in why


@pytest.mark.parametrize(
    ("url", "mode"),
    [
        ("https://docs.python.org/3/", Mode.ALLOW),
        ("HTTPS://DOCS.Python.ORG./3/", Mode.ALLOW),  # case and the trailing dot
        ("http://me:pw@docs.python.org/", Mode.ALLOW),  # userinfo is not the host
        ("docs.python.org", Mode.ALLOW),  # a bare host
        ("https://docs.python.org.evil.example/", Mode.ASK),
        ("https://python.org/", Mode.ASK),
        ("https://d\u00f3cs.python.org/", Mode.ASK),  # IDN: xn--dcs-..., another host
        ("http://[::ffff:127.0.0.1]/", Mode.ASK),
        ("http://evil.example/", Mode.DENY),
        ("http://EVIL.example.:8080/x", Mode.DENY),
        ("http://docs.python.org@evil.example/", Mode.DENY),  # the host is after the @
        ("http://docs.python.org:pw@evil.example/", Mode.DENY),
        # not normalisable: denied, since a deny names the argument
        ("http://docs.python.org%2eevil.example/", Mode.DENY),
        ("http://evil%2eexample/", Mode.DENY),
        ("//evil.example/", Mode.DENY),  # no scheme: not a bare host either
        ("docs.python.org/x", Mode.DENY),
        ("docs.python.org:443", Mode.ALLOW),  # a bare host and port: the host on that port
        ("evil.example:8080", Mode.DENY),
        ("docs.python.org:http", Mode.DENY),  # no port: not normalisable
        ("http://docs.python.org\u0000/", Mode.DENY),
        ("http:///x", Mode.DENY),  # no host
        ("http://[::1/", Mode.DENY),
    ],
)
def test_a_url_argument(table: Table, url: str, mode: Mode) -> None:
    got, why = _decide(table, RULES, "web.fetch", {"url": url})
    assert got is mode, why


def test_the_reason_names_the_deciding_constraint(table: Table) -> None:
    assert _decide(table, RULES, "git.git_status", {"repo_path": "repo"}) == (
        Mode.ALLOW,
        "grant: git.git_status allow on repo_path under repo",
    )
    assert _decide(table, RULES, "web.fetch", {"url": "http://evil.example/"}) == (
        Mode.DENY,
        "grant: web.fetch deny on url on evil.example",
    )


def test_the_most_specific_rule_decides_and_a_deny_always_wins(table: Table) -> None:
    rules = b"""
[[grant]]
tool = "git.git_status"
mode = "allow"

[[grant]]
tool = "git.git_status"
mode = "ask"
args = { repo_path = { paths = ["repo/private"] } }

[[grant]]
tool = "git.git_status"
mode = "allow"
args = { repo_path = { paths = ["repo/private/ok"] } }
"""
    for path, mode in [("x", "allow"), ("repo/private/a", "ask"), ("repo/private/ok/b", "allow")]:
        assert _decide(table, rules, "git.git_status", {"repo_path": path})[0] is Mode(mode), path
    denied = rules + b'[[grant]]\ntool = "git.git_status"\nmode = "deny"\n'
    got = _decide(table, denied, "git.git_status", {"repo_path": "repo/private/ok/b"})
    assert got[0] is Mode.DENY


def test_a_missing_or_non_string_argument_meets_no_constraint() -> None:
    """The table's parser refuses both for a listed tool (its schema's types); the rule's own
    match refuses them too: missing meets no constraint, a non-string only a deny's."""
    (allow,) = parse_grants(
        b'[[grant]]\ntool = "x.t"\nmode = "allow"\nargs = { p = { paths = [""] } }\n',
        _Unlisted(),
    )
    deny = Rule(allow.tool, Mode.DENY, allow.grant, args=allow.args)
    strings = frozenset({"p"})
    assert allow.covers("x.t", string_fields({"p": "a"}, strings, "/workspace")) == 1
    for args in ({}, {"q": "a"}):
        target = string_fields(args, strings, "/workspace")
        assert allow.covers("x.t", target) < 0
        assert deny.covers("x.t", target) < 0
    for value in (["a"], 3, None, {"a": 1}):
        target = string_fields({"p": value}, strings, "/workspace")
        assert allow.covers("x.t", target) < 0
        assert deny.covers("x.t", target) >= 0
    # a server whose cwd is outside the workspace: a relative path names no workspace file
    assert allow.covers("x.t", string_fields({"p": "a"}, strings, "/tmp")) < 0


class _Unlisted:
    """A table with one MCP tool whose server was never listed (its arguments unknown)."""

    def grant_row(self, name: str) -> Tool | None:
        return grant_only_row(name)

    def get(self, name: str) -> Tool | None:
        return None

    def grant_names(self) -> list[str]:
        return ["<server>.<tool>"]

    def names(self) -> tuple[str, ...]:
        return ()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ("{ repo_path = { prefix = ['repo'] } }", "exactly one of paths or hosts"),
        ("{ repo_path = { paths = ['repo'], hosts = ['a.b'] } }", "exactly one of paths or hosts"),
        ("{ repo_path = { paths = [] } }", "paths: must be a non-empty list"),
        ("{ repo_path = { paths = 'repo' } }", "paths: must be a non-empty list"),
        ("{ repo_path = { paths = ['../x'] } }", "'..' in a path"),
        ("{ repo_path = { paths = ['/workspace/repo'] } }", "a path is a relative string"),
        ("{ repo_path = { paths = [3] } }", "a path is a relative string"),
        ("{ repo_path = ['repo'] }", "exactly one of paths or hosts"),
        ("{}", "write args = {"),
        ("'repo'", "write args = {"),
        ("{ repo_pth = { paths = ['repo'] } }", "has no string argument 'repo_pth'"),
        ("{ files = { paths = ['repo'] } }", "has no string argument 'files'"),  # an array
        ("{ repo_path = { hosts = ['*'] } }", "no '*'"),
        ("{ repo_path = { hosts = ['a_b.example'] } }", "is not a host name"),
        ("{ repo_path = { hosts = ['a.example%00'] } }", "'%' in a host"),
    ],
)
def test_a_bad_constraint_is_refused_with_a_clear_line(table: Table, args: str, says: str) -> None:
    text = f'[[grant]]\ntool = "git.git_add"\nmode = "allow"\nargs = {args}\n'
    with pytest.raises(GrantsError, match=r"grant 1\.args") as exc:
        parse_grants(text.encode(), table)
    assert says in str(exc.value)


def test_args_is_the_only_key_an_mcp_rule_takes(table: Table) -> None:
    for key in ("paths = ['repo']", "hosts = ['a.b']", "files = ['a']"):
        text = f'[[grant]]\ntool = "git.git_status"\nmode = "allow"\n{key}\n'
        with pytest.raises(GrantsError, match="unknown key"):
            parse_grants(text.encode(), table)


def test_a_rule_that_names_no_string_argument_of_the_listing_fails_closed(
    table: Table,
) -> None:
    """Read before the server was listed, a rule's argument cannot be checked; once listed, one
    its schema lacks (a typo) never allows, and as a deny it denies every call."""
    typo = b'[[grant]]\ntool = "git.git_status"\nmode = "%s"\n'
    typo += b'args = { repo_pth = { paths = ["a"] } }\n'
    allow = parse_grants(typo % b"allow", _Unlisted())
    deny = parse_grants(typo % b"deny", _Unlisted())
    args = '{"repo_path": "a"}'
    assert decide(table, allow, "git.git_status", args, "/ws").decision.mode is Mode.ASK
    d = decide(table, deny, "git.git_status", args, "/ws").decision
    assert d.mode is Mode.DENY
    assert "names its argument 'repo_pth'" in d.reason


def test_a_rule_reads_back_the_same(table: Table) -> None:
    text = b'[[grant]]\ntool = "web.fetch"\nmode = "ask"\nargs = { url = { hosts = ["a.b"] } }\n'
    (rule,) = parse_grants(text, table)
    assert parse_grants(rule.to_toml().encode(), table) == (rule,)
    assert rule_from_json(rule.to_json(), table) == rule
    tool_wide = Rule("git.git_status", Mode.ALLOW, rule.grant)
    assert rule_from_json(tool_wide.to_json(), table) == tool_wide


def test_only_a_deny_of_every_call_hides_a_tool(table: Table) -> None:
    row = table.get("git.git_status")
    assert row is not None
    assert listed(parse_grants(RULES, table), row)
    every = b'[[grant]]\ntool = "git.git_status"\nmode = "deny"\n'
    assert not listed(parse_grants(every, table), row)
