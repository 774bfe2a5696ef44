"""The egress policy: which host entries parse, and what a server's proxy lets through."""

from __future__ import annotations

import ipaddress

import pytest

from boxmaker.brokerd.mcp.hosts import EgressPolicy, HostError, parse_host, split_host_port


@pytest.mark.parametrize(
    ("text", "host", "ports"),
    [
        ("example.com", "example.com", (80, 443)),
        ("EXAMPLE.com.", "example.com", (80, 443)),
        ("example.com:8443", "example.com", (8443,)),
        ("127.0.0.1", "127.0.0.1", (80, 443)),
        ("127.0.0.1:8080", "127.0.0.1", (8080,)),
        ("[::1]", "::1", (80, 443)),
        ("[0:0::1]:8080", "::1", (8080,)),
    ],
)
def test_entries_parse_to_one_canonical_spelling(text: str, host: str, ports: tuple[int]) -> None:
    entry = parse_host(text)
    assert (entry.host, entry.ports) == (host, ports)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a b",
        "-a.com",
        "a..b",
        "::1",
        "[::1",
        "[::1]x",
        "[1.2.3.4]",
        "h:",
        "h:x",
        "h:0",
        "h:65536",
        "127.1",
        "2130706433",
        "a_b.com",
        "*.example.com",
        "x" * 64 + ".com",
    ],
)
def test_bad_entries_are_refused(text: str) -> None:
    with pytest.raises(HostError):
        parse_host(text)


POLICY = EgressPolicy([parse_host("example.com"), parse_host("127.0.0.1:8080")])


@pytest.mark.parametrize(
    ("target", "allowed"),
    [
        ("example.com:443", True),
        ("example.com:80", True),
        ("example.com:8080", False),  # a port the entry does not name
        ("www.example.com:443", False),  # no subdomains
        ("example.co:443", False),
        ("127.0.0.1:8080", True),
        ("127.0.0.1:8081", False),
        ("127.0.0.2:8080", False),
        ("localhost:8080", False),  # a name for the granted address is not the address
    ],
)
def test_only_named_hosts_and_ports_are_targets(target: str, allowed: bool) -> None:
    host, port = split_host_port(target)
    assert port is not None
    assert (POLICY.why_not_target(host, port) is None) is allowed


def addrs(*texts: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return [ipaddress.ip_address(t) for t in texts]


@pytest.mark.parametrize(
    ("resolved", "allowed"),
    [
        (["93.184.215.14"], True),
        (["127.0.0.1"], True),  # granted by exact address
        (["127.0.0.2"], False),
        (["::ffff:127.0.0.2"], False),
        (["::1"], False),
        (["10.0.0.1"], False),
        (["169.254.169.254"], False),
        (["93.184.215.14", "192.168.1.1"], False),  # one refused address refuses the name
        ([], False),
    ],
)
def test_every_resolved_address_is_checked_as_fetch_does(
    resolved: list[str], allowed: bool
) -> None:
    host = resolved[0] if resolved == ["127.0.0.1"] else "example.com"
    port = 8080 if host == "127.0.0.1" else 443
    assert (POLICY.why_not_addresses(addrs(*resolved), host, port) is None) is allowed
