"""Grants for `shell` and `fetch`, their config keys, and taint in the decision, on the cores:
per-host fetch rules (ask by default), exact addresses as fetch's allow set, no "always" for
shell, and a tainted session's writes asking with the reason, in the live decision and in replay.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.config import ConfigError, parse_config
from boxmaker.brokerd.grants import GrantsError, Mode, Rule
from boxmaker.brokerd.policy import LogError
from boxmaker.brokerd.sandbox import SandboxLimits
from boxmaker.brokerd.taint import Record, taint_of
from boxmaker.brokerd.targets import HostPort
from boxmaker.brokerd.tools import fetch as fetch_tool
from boxmaker.brokerd.tools.fetch import FetchLimits
from boxmaker.brokerd.tools.table import TABLE
from boxmaker.proto.hash import sha256_hex
from boxmaker.session.chain import GENESIS_PREV, encode_line
from tests.support.brokerd.core import always_rule, decide, decision, listed, parse_grants, replay

WS = "/srv/ws"
GRANTS = b"""
[[grant]]
tool = "write_file"
mode = "allow"

[[grant]]
tool = "shell"
mode = "allow"

[[grant]]
tool = "fetch"
mode = "allow"
hosts = ["docs.python.org", "127.0.0.1"]

[[grant]]
tool = "fetch"
mode = "deny"
hosts = ["evil.example"]
"""


def rules() -> tuple[Rule, ...]:
    return parse_grants(GRANTS)


def test_fetch_is_per_host_and_asks_for_any_host_not_granted() -> None:
    rs = rules()
    assert decision(rs, "fetch", "docs.python.org").mode is Mode.ALLOW
    assert decision(rs, "fetch", "evil.example").mode is Mode.DENY
    d = decision(rs, "fetch", "example.org")
    assert (d.mode, d.reason) == (
        Mode.ASK,
        "no grant for fetch covers example.org: fetch asks by default",
    )
    assert decision((), "fetch", "example.org").mode is Mode.ASK  # no fetch rule at all: ask
    # the host is taken from the parsed URL, lower case, an address in its plain form
    assert (
        decide(rs, "fetch", '{"url": "HTTP://Docs.Python.ORG/3/"}', WS).decision.mode is Mode.ALLOW
    )
    assert decide(rs, "fetch", '{"url": "http://[::1]:8/"}', WS).target == HostPort("::1", 8)
    bad = decide(rs, "fetch", '{"url": "not a url"}', WS).decision
    assert (bad.mode, bad.reason.startswith("bad URL: the URL names no host")) == (Mode.DENY, True)


def test_exact_addresses_feed_fetchs_allow_set_and_a_deny_gives_none() -> None:
    text = b'[[grant]]\ntool="fetch"\nmode="ask"\nhosts=["127.0.0.1", "[::1]", "a.lan"]\n'
    rs = parse_grants(text + b'[[grant]]\ntool="fetch"\nmode="deny"\nhosts=["10.0.0.1"]\n')
    assert allowed_addresses(rs) == {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
    assert allowed_addresses(parse_grants(b'[[grant]]\ntool="fetch"\nmode="allow"\n')) == set()
    denied = fetch_tool._addresses(Rules(rs), True)  # type: ignore[arg-type]
    assert denied == {ipaddress.ip_address("10.0.0.1")}


@dataclass
class Rules:  # the part of a call's context fetch reads its addresses from
    rules: tuple[Rule, ...]


def allowed_addresses(rs: tuple[Rule, ...]) -> frozenset[fetch_tool.Granted]:
    return fetch_tool._addresses(Rules(rs), False)  # type: ignore[arg-type]


def test_grants_hosts_are_normalised_like_the_urls() -> None:
    hosts = b'hosts=["Example.ORG.", "0x7f.1", "[::ffff:a00:1]"]\n'
    text = b'[[grant]]\ntool="fetch"\nmode="deny"\n' + hosts
    (rule,) = parse_grants(text)
    assert rule.hosts == ("example.org", "127.0.0.1", "10.0.0.1")


def test_shell_has_no_argument_constraint_and_always_adds_nothing() -> None:
    rs = rules()
    assert decide(rs, "shell", '{"command": "rm -rf /"}', WS).decision.mode is Mode.ALLOW
    assert decision((), "shell", "").mode is Mode.DENY  # no grant: denied, like the file tools
    assert always_rule("shell", "") is None  # "always" on shell would allow every command
    rule = always_rule("fetch", HostPort("example.org", 443), {"url": "https://example.org/a"})
    assert rule is not None
    assert parse_grants(rule.to_toml().encode()) == (rule,)
    assert decision((rule,), "fetch", HostPort("example.org", 443)).mode is Mode.ALLOW
    assert decision((rule,), "fetch", HostPort("example.org", 80)).mode is Mode.ASK
    assert decision((rule,), "fetch", HostPort("example.com", 443)).mode is Mode.ASK


def test_find_tool_lists_fetch_unless_every_host_is_denied() -> None:
    assert listed((), "fetch")
    assert not listed(parse_grants(b'[[grant]]\ntool="fetch"\nmode="deny"\n'), "fetch")
    assert not listed((), "shell")
    assert listed(rules(), "shell")


def test_class_comes_from_the_deciding_rule() -> None:
    rs = parse_grants(b'[[grant]]\ntool="shell"\nmode="allow"\nclass="public"\n')
    assert decision(rs, "shell", "").class_ == "public"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"[[grant]]\ntool='shell'\nmode='allow'\npaths=['a']\n", "unknown key(s) paths"),
        (b"[[grant]]\ntool='fetch'\nmode='allow'\nhosts=[]\n", "non-empty"),
        (b"[[grant]]\ntool='fetch'\nmode='allow'\nhosts=['under_score.test']\n", "not a host"),
        (b"[[grant]]\ntool='fetch'\nmode='allow'\nhosts=['*.example.org']\n", "no wildcard"),
        (b"[[grant]]\ntool='fetch'\nmode='allow'\nhosts=['300.1.1.1']\n", "not an IPv4"),
        (b"[[grant]]\ntool='fetch'\nmode='allow'\nhosts=['http://a.org/']\n", "not a host name"),
        (b"[[grant]]\ntool='fetch'\nmode='allow'\nclass='secret'\n", "class must be one of"),
        (b"[[grant]]\ntool='read_file'\nmode='allow'\nclass='public'\n", "unknown key(s) class"),
    ],
)
def test_bad_shell_and_fetch_grants_are_refused(text: bytes, message: str) -> None:
    with pytest.raises(GrantsError) as info:
        parse_grants(text)
    assert message in str(info.value)


BASE = b'[broker]\nsocket="s"\nowner_socket="o"\nworkspace="w"\ngrants="g"\nhome="h"\nlog="l"\n'


def test_the_shell_and_fetch_limits_are_config_keys_with_bounds() -> None:
    c = parse_config(BASE + b"[broker.shell]\ntimeout_ms=500\nprocesses=16\n"
                     b"[broker.fetch]\nmax_bytes=4096\n", "/x", TABLE.sections())  # fmt: skip
    assert c.section("shell", SandboxLimits) == SandboxLimits(timeout_ms=500, processes=16)
    assert c.section("fetch", FetchLimits) == FetchLimits(max_bytes=4096)
    for bad, message in [
        (
            b"[broker.shell]\ntimeout_ms=5\n",
            "broker.shell.timeout_ms must be an integer from 100 to 3600000",
        ),
        (b"[broker.shell]\nnetwork=true\n", "unknown key broker.shell.network; known here"),
        (b"[broker.fetch]\nmax_redirects=21\n", "broker.fetch.max_redirects must be an integer"),
        (b"[broker.fetch]\nmax_bytes='1M'\n", "broker.fetch.max_bytes must be an integer"),
        (b"[broker.shel]\n", "unknown section [broker.shel]; did you mean [broker.shell]?"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_config(BASE + bad, "/x", TABLE.sections())
        assert message in str(info.value)


def test_a_tainted_session_asks_before_it_writes_with_the_reason() -> None:
    rs = rules()
    taint = taint_of([Record(1, "fetch", untrusted=True, fetched_host="127.0.0.1")])
    args = '{"path": "out.txt", "content": "x"}'
    clean = decide(rs, "write_file", args, WS)
    assert (clean.decision.mode, clean.tainted) == (Mode.ALLOW, None)
    dirty = decide(rs, "write_file", args, WS, taint)
    assert dirty.decision.mode is Mode.ASK
    assert dirty.tainted == dirty.decision.reason
    assert "untrusted content from fetch of 127.0.0.1 at call 1" in dirty.decision.reason
    for tool, a in [
        ("shell", '{"command": "ls"}'),
        ("fetch", '{"url": "http://docs.python.org/"}'),
    ]:
        assert decide(rs, tool, a, WS, taint).decision.mode is Mode.ASK
    # reading stays on its grant; a deny stays a deny
    assert (
        decide(rs, "fetch", '{"url": "http://evil.example/"}', WS, taint).decision.mode is Mode.DENY
    )


def _log(records: Sequence[tuple[str, Mapping[str, object]]]) -> bytes:
    out, prev = b"", GENESIS_PREV
    for seq, (kind, fields) in enumerate(records):
        line = encode_line(kind, seq, prev, {"time": "2026-11-30T03:48:37.123Z", **fields})
        out, prev = out + line, sha256_hex(line)
    return out


Line = tuple[str, Mapping[str, object]]


def _request(call_id: str, session: str, tool: str, args: Mapping[str, object]) -> Line:
    text = orjson.dumps(args).decode()
    d = decide(parse_grants(GRANTS), tool, text, WS)
    return "request", {"id": call_id, "session": session, "epoch": 0, "tool": tool,
                       "arguments": text, "canonical": text, "hash": d.hash}  # fmt: skip


def _result(call_id: str, *, untrusted: bool) -> Mapping[str, object]:
    """A result record as brokerd writes it (proto/decision.py types every field)."""
    return {"id": call_id, "error": False, "truncated": False, "chars": 2,
            "untrusted": untrusted, "host": None, "class": "public"}  # fmt: skip


def test_replay_recomputes_the_taint_from_the_results_untrusted_flags() -> None:
    ask = "write_file asks because the session read untrusted content from shell at call 1; "
    ask += "write_file can write or send"
    write = {"path": "a", "content": "x"}
    records: list[Line] = [
        ("start", {"grants": GRANTS.decode(), "workspace": WS}),
        _request("1", "s1", "shell", {"command": "ls"}),
        ("decision", {"id": "1", "mode": "allow", "reason": "grant: shell allow on any command"}),
        ("result", _result("1", untrusted=True)),
        _request("2", "s2", "write_file", write),  # another session: clean
        ("decision", {"id": "2", "mode": "allow", "reason": "grant: write_file allow on a"}),
        _request("3", "s1", "write_file", write),
        ("decision", {"id": "3", "mode": "ask", "reason": ask}),
    ]
    assert replay(_log(records)) == 3
    # the same log, but the shell's output logged as trusted: the ask no longer replays
    records[3] = ("result", _result("1", untrusted=False))
    with pytest.raises(LogError) as info:
        replay(_log(records))
    assert "line 8: replay decides allow" in str(info.value)


def test_the_examples_and_the_local_profile_say_what_the_code_does() -> None:
    conf = Path(__file__).resolve().parents[3] / "conf"
    # every commented limit in the example, uncommented, is the default it claims to be
    text = (conf / "brokerd.toml.example").read_text()
    shown = re.sub(r"^#(\w+ = \d+)$", r"\1", text, flags=re.M)
    config = parse_config(shown.encode(), str(conf), TABLE.sections())
    assert config.section("shell", SandboxLimits) == SandboxLimits()
    assert config.section("fetch", FetchLimits) == FetchLimits()
    written = tomllib.loads(shown)["broker"]
    for name, section in TABLE.sections().items():  # every key of every section is shown
        assert written[name].keys() == {f.name for f in dataclasses.fields(section)}
    example = parse_grants((conf / "grants.toml.example").read_bytes())
    assert decision(example, "fetch", "docs.python.org").mode is Mode.ALLOW
    assert decision(example, "shell", "").mode is Mode.ASK
    # make run: reads allowed in the workspace, writes, commands and the web asked about
    local = parse_config((conf / "brokerd.local.toml").read_bytes(), str(conf))
    assert local.workspace == str(conf.parent / "run" / "workspace")
    starter = parse_grants((conf / "grants.local.toml").read_bytes())
    assert decision(starter, "read_file", ("a",)).mode is Mode.ALLOW
    assert decision(starter, "list_dir", ()).mode is Mode.ALLOW
    asked: list[tuple[str, tuple[str, ...] | str]] = [
        ("write_file", ("a",)), ("edit_file", ("a",)), ("note", "notes"), ("shell", ""),
        ("fetch", "example.org"),
    ]  # fmt: skip
    for tool, target in asked:
        assert decision(starter, tool, target).mode is Mode.ASK, tool
