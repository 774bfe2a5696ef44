"""A fetch grant may name a port (issue 37 item 3): `hosts = ["127.0.0.1:8080"]` opens that port
of that host only, "always" adds exactly the host and port it saw, and every other spelling of
the address is still judged as the address, on that port."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from boxmaker.brokerd.grants import GrantsError, Mode
from tests.support.brokerd.approvals import Call, owner_says
from tests.support.brokerd.core import decide, parse_grants
from tests.support.brokerd.fetch import PAGE, Server, body
from tests.support.brokerd.rig import Rig

WS = "/srv/ws"


def grant(mode: str, *hosts: str) -> bytes:
    listed = ", ".join(f'"{h}"' for h in hosts)
    return f'[[grant]]\ntool = "fetch"\nmode = "{mode}"\nhosts = [{listed}]\n\n'.encode()


def fetch_mode(rules: bytes, url: str) -> Mode:
    return decide(parse_grants(rules), "fetch", f'{{"url": "{url}"}}', WS).decision.mode


# Spellings of 127.0.0.1 a URL may use; each must be judged as 127.0.0.1 on its port.
SPELLINGS = [
    "127.0.0.1",
    "2130706433",  # decimal
    "0177.0.0.1",  # octal
    "0x7f.0.0.1",  # hex
    "127.1",  # short
    "127.0.0.1.",  # trailing dot
    "[::ffff:127.0.0.1]",  # v4-mapped
    "[::127.0.0.1]",  # v4-compatible
    "[2002:7f00:1::]",  # 6to4
    "[64:ff9b::7f00:1]",  # NAT64
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_port_grant_covers_its_port_of_every_spelling_and_no_other_port(spelling: str) -> None:
    rules = grant("allow", "127.0.0.1:8080")
    assert fetch_mode(rules, f"http://{spelling}:8080/x") is Mode.ALLOW
    assert fetch_mode(rules, f"http://{spelling}:8081/x") is Mode.ASK
    assert fetch_mode(rules, f"http://{spelling}/x") is Mode.ASK  # 80
    assert fetch_mode(rules, f"https://{spelling}/x") is Mode.ASK  # 443


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_port_deny_holds_for_every_spelling_on_that_port_only(spelling: str) -> None:
    rules = grant("allow", "*") + grant("deny", "127.0.0.1:8080")
    assert fetch_mode(rules, f"http://{spelling}:8080/") is Mode.DENY
    assert fetch_mode(rules, f"HTTP://{spelling.upper()}:8080/") is Mode.DENY
    assert fetch_mode(rules, f"http://{spelling}:8081/") is Mode.ALLOW


@pytest.mark.parametrize(
    ("entry", "canonical"),
    [
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("[::ffff:127.0.0.1]:8080", "127.0.0.1:8080"),
        ("[::127.0.0.1]:8080", "127.0.0.1:8080"),
        ("[2002:7f00:1::]:8080", "127.0.0.1:8080"),
        ("2130706433:8080", "127.0.0.1:8080"),
        ("0x7f.1:8080", "127.0.0.1:8080"),
        ("127.0.0.1.:08080", "127.0.0.1:8080"),
        ("Docs.Python.ORG.:443", "docs.python.org:443"),
        ("[::1]:8080", "[::1]:8080"),
        ("[::1]", "::1"),
        ("example.org", "example.org"),
    ],
)
def test_a_grant_entry_is_normalised_with_its_port(entry: str, canonical: str) -> None:
    (rule,) = parse_grants(grant("allow", entry))
    assert rule.hosts == (canonical,)
    assert parse_grants(rule.to_toml().encode()) == (rule,)


@pytest.mark.parametrize(
    "entry",
    [
        "h.test:0",
        "h.test:65536",
        "h.test:x",
        "h.test:-1",
        "h.test:\uff18\uff10",
        "h.test:",
        "[::1]x",
    ],
)
def test_a_bad_port_is_one_clear_error(entry: str) -> None:
    with pytest.raises(GrantsError, match=r"grant 1\.hosts: .*(port|after \])"):
        parse_grants(grant("allow", entry))


def test_a_port_entry_beats_the_host_on_every_port_and_a_deny_still_wins() -> None:
    rules = grant("ask", "example.org") + grant("allow", "example.org:8443")
    assert fetch_mode(rules, "https://example.org:8443/") is Mode.ALLOW
    assert fetch_mode(rules, "https://example.org/") is Mode.ASK
    rules = grant("deny", "example.org") + grant("allow", "example.org:8443")
    assert fetch_mode(rules, "https://example.org:8443/") is Mode.DENY


# ---- "always" through a real brokerd, fetching real local servers ----------------------------


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    one, two = Server(), Server()
    for srv in (one, two):
        srv.routes["/page"] = body(PAGE)
    yield one, two
    one.close()
    two.close()


ASK_FETCH = '[[grant]]\ntool = "read_file"\nmode = "allow"\n'


@pytest.mark.parametrize(
    "spelled",
    ["http://127.0.0.1:{p}/page", "HTTP://127.0.0.1:{p}/page?q=1", "http://127.0.0.1.:{p}/page"],
)
def test_always_on_a_loopback_url_grants_that_port_only(
    rig: Rig, servers: tuple[Server, Server], spelled: str
) -> None:
    one, two = servers
    rig.grants_text = ASK_FETCH
    rig.start()
    settled = rig.grants.stat().st_mtime - 60  # the file is not mid-edit
    os.utime(rig.grants, (settled, settled))
    call = Call(rig, "fetch", {"url": spelled.format(p=one.port)})
    held = call.wait_needed()
    owner_says(rig, held["id"], "always")
    text = call.result()
    written = rig.grants.read_text()
    assert f'hosts = ["127.0.0.1:{one.port}"]' in written, written
    if spelled.startswith("http://127.0.0.1:"):  # the one spelling that may reach the address
        assert "Heading" in text, text
        assert one.hits
    # that port again: no question, it runs
    again = rig.call("fetch", {"url": f"http://127.0.0.1:{one.port}/page"})
    assert "Heading" in str(again["content"]), again
    # another port of the same address: asked, and refused when the owner says no
    other = Call(rig, "fetch", {"url": f"http://127.0.0.1:{two.port}/page"})
    owner_says(rig, other.wait_needed()["id"], "no")
    assert other.result().startswith("error: denied")
    assert two.hits == []


@pytest.mark.parametrize(
    ("value", "allowed", "denied"),
    [
        ("http://127.0.0.1:8080/x", True, True),
        ("http://[::ffff:127.0.0.1]:8080/", True, True),
        ("http://2130706433:8080/", True, True),
        ("127.0.0.1:8080", True, True),  # a bare host and port
        ("127.0.0.1.:8080", True, True),
        ("http://127.0.0.1:8081/", False, False),
        ("http://127.0.0.1/", False, False),  # 80
        ("127.0.0.1", False, True),  # no port: the port it reaches is not known
    ],
)
def test_an_mcp_host_constraint_honours_its_port(value: str, allowed: bool, denied: bool) -> None:
    from boxmaker.brokerd.grants import ArgRule
    from boxmaker.brokerd.targets import string_fields

    rule = ArgRule("url", hosts=("127.0.0.1:8080",))
    fields = string_fields({"url": value}, frozenset({"url"}), "/workspace")
    assert (rule.depth(fields, deny=False) >= 0, rule.depth(fields, deny=True) >= 0) == (
        allowed,
        denied,
    )
