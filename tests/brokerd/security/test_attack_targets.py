"""Issue 37 class 3, on the cores: a target is judged as its receiver reads it. A path a server
would expand ($PWD, ${HOME}, $(...), a glob) meets no allow and every deny; an IPv6 form of a
denied IPv4 address is that address; an address grant of the egress proxy opens its own port of
that address only; "always" never grants every port of a loopback or private address."""

from __future__ import annotations

import ipaddress

import orjson
import pytest

from boxmaker.brokerd import netcheck
from boxmaker.brokerd.grants import Mode
from boxmaker.brokerd.mcp.hosts import EgressPolicy, parse_host
from boxmaker.brokerd.targets import (
    BadTarget,
    HostPort,
    normal_host,
    string_fields,
    workspace_path,
)
from tests.support.brokerd.core import WS, always_rule, decide, parse_grants

EXPANDED = [
    "$PWD/secret",
    "${HOME}/.ssh/id_rsa",
    "$(cat /workspace/secret)",
    "repo/`id`",
    "repo/$X",
    "secre*",
    "secre?",
    "[s]ecret",
    "{repo,secret}",
    "repo/${IFS}",
]


@pytest.mark.parametrize("value", EXPANDED)
def test_a_path_a_server_may_expand_is_no_path(value: str) -> None:
    with pytest.raises(BadTarget, match="expanded by the server"):
        workspace_path(value, "/workspace")


@pytest.mark.parametrize("value", EXPANDED)
def test_such_a_path_meets_every_deny_and_no_allow(value: str) -> None:
    from boxmaker.brokerd.grants import ArgRule

    fields = string_fields({"repo_path": value}, frozenset({"repo_path"}), "/workspace")
    allow = ArgRule("repo_path", paths=(("repo",), ()))  # repo, and the whole workspace
    assert allow.depth(fields, deny=False) == -1
    assert ArgRule("repo_path", paths=(("secret",),)).depth(fields, deny=True) >= 0


@pytest.mark.parametrize("value", ["repo", "/workspace/repo/a b", "notes/50%.md", "a=b", "x!"])
def test_plain_paths_still_are_paths(value: str) -> None:
    assert workspace_path(value, "/workspace")


# The IPv4 address 10.1.2.3 and 127.0.0.1 inside IPv6 forms.
V6_OF_10_1_2_3 = [
    "::ffff:10.1.2.3",  # v4-mapped
    "::10.1.2.3",  # v4-compatible
    "::ffff:0:a01:203",  # SIIT
    "2002:a01:203::1",  # 6to4
    "64:ff9b::a01:203",  # NAT64
    "64:ff9b:1::a01:203",  # NAT64, local use
    "2001:0:4136:e378:8000:63bf:f5fe:fdfc",  # Teredo, the client's address inverted
]
DENY_10 = b'[[grant]]\ntool = "fetch"\nmode = "allow"\nhosts = ["*"]\n'
DENY_10 += b'[[grant]]\ntool = "fetch"\nmode = "deny"\nhosts = ["10.1.2.3"]\n'


@pytest.mark.parametrize("v6", V6_OF_10_1_2_3)
def test_an_ipv6_form_of_a_denied_ipv4_address_is_that_address(v6: str) -> None:
    assert normal_host(f"[{v6}]") == "10.1.2.3"
    url = f"http://[{v6}]/x"
    got = decide(parse_grants(DENY_10), "fetch", orjson.dumps({"url": url}).decode(), WS)
    assert got.decision.mode is Mode.DENY, (v6, got.decision)


@pytest.mark.parametrize("v6", [v.replace("a01:203", "7f00:1") for v in V6_OF_10_1_2_3[2:6]])
def test_an_ipv6_form_of_loopback_is_loopback(v6: str) -> None:
    assert netcheck.why_refused(ipaddress.ip_address(v6)) == "a loopback address"
    for v in ("::127.0.0.1", "::ffff:127.0.0.1"):
        assert netcheck.why_refused(ipaddress.ip_address(v)) == "a loopback address"


@pytest.mark.parametrize("v6", ["::1", "::", "2606:4700::1111", "fe80::1"])
def test_other_ipv6_addresses_stay_themselves(v6: str) -> None:
    assert normal_host(f"[{v6}]") == str(ipaddress.IPv6Address(v6))


LOOP = [ipaddress.ip_address("127.0.0.1")]
POLICY = EgressPolicy(
    [parse_host("127.0.0.1:8080"), parse_host("granted.test:9090"), parse_host("web.test")]
)


@pytest.mark.parametrize(
    ("host", "port", "resolved", "allowed"),
    [
        ("127.0.0.1", 8080, LOOP, True),  # the entry itself
        ("granted.test", 9090, LOOP, False),  # a granted name that resolves to it: not it
        ("web.test", 443, LOOP, False),
        ("web.test", 80, [ipaddress.ip_address("::ffff:127.0.0.1")], False),
        ("granted.test", 9090, [ipaddress.ip_address("::127.0.0.1")], False),
        ("127.0.0.1", 9090, LOOP, False),  # another port of the granted address
        ("web.test", 443, [ipaddress.ip_address("93.184.215.14")], True),
    ],
)
def test_an_address_grant_opens_its_own_port_of_that_address_only(
    host: str, port: int, resolved: list[netcheck.Address], allowed: bool
) -> None:
    assert (POLICY.why_not_addresses(resolved, host, port) is None) is allowed


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.0.0.1:80/v1/models",
        "https://127.0.0.1/",
        "http://[::1]/",
        "http://10.0.0.5/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8080/",
    ],
)
def test_always_on_a_loopback_or_private_address_adds_that_port_only(url: str) -> None:
    from boxmaker.brokerd.targets import url_host_port

    at = url_host_port(url)
    rule = always_rule("fetch", at, {"url": url})
    assert rule is not None
    assert rule.hosts == (str(at),)
    assert at.port is not None
    assert str(at).endswith(f":{at.port}")


def test_always_on_a_public_host_adds_it_on_that_port() -> None:
    at = HostPort("93.184.215.14", 80)
    rule = always_rule("fetch", at, {"url": "http://93.184.215.14/"})
    assert rule is not None
    assert rule.hosts == ("93.184.215.14:80",)
