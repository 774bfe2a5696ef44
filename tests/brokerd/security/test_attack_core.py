"""Held-out variants of issue 27's classes 1-3, on the cores (the verdict, the targets, "always"):
each fails on the code before its fix."""

from __future__ import annotations

import orjson
import pytest

from boxmaker.brokerd.grants import Mode
from boxmaker.brokerd.targets import HostPort
from tests.support.brokerd.core import READ_DENIED, WS, always_rule, decide, decision, parse_grants


def mode_of(grants: bytes, tool: str, args: dict[str, object]) -> Mode:
    return decide(parse_grants(grants), tool, orjson.dumps(args).decode(), WS).decision.mode


# ---- class 1: no tool answers about what read_file denies ---------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("list_dir", {"path": "secrets"}),  # the names of a denied folder
        ("list_dir", {"path": "./secrets/"}),
        ("list_dir", {"path": f"{WS}/secrets/sub"}),
        ("write_file", {"path": "secrets/key/x", "content": ""}),  # "not a folder": it exists
        ("write_file", {"path": "secrets//new", "content": "x"}),
        ("edit_file", {"path": "notes/pin.txt", "old": "1", "new": "1"}),
        ("read_file", {"path": "notes/pin.txt/x"}),  # a path through a denied file
        ("list_dir", {"path": "notes/pin.txt"}),
        ("write_file", {"path": "notes/./pin.txt", "content": "x"}),
    ],
)
def test_a_read_deny_denies_every_path_tool_there(tool: str, args: dict[str, object]) -> None:
    """What read_file denies, list_dir, write_file and edit_file are denied too (their answers,
    errors included, tell what is there), and a denied file denies every path through its name."""
    assert mode_of(READ_DENIED, tool, args) is Mode.DENY


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("list_dir", {"path": "notes"}),  # the folder of a denied file is listed (less that name)
        ("write_file", {"path": "notes/pin.txt.bak", "content": "x"}),
        ("read_file", {"path": "secretsx/a"}),
        ("list_dir", {"path": "."}),
        ("edit_file", {"path": "notes/a.md", "old": "a", "new": "b"}),
    ],
)
def test_what_no_deny_covers_stays_allowed(tool: str, args: dict[str, object]) -> None:
    assert mode_of(READ_DENIED, tool, args) is Mode.ALLOW


@pytest.mark.parametrize(
    "grants",
    [
        READ_DENIED,
        b'[[grant]]\ntool = "shell"\nmode = "allow"\n'
        b'[[grant]]\ntool = "read_file"\nmode = "deny"\nfiles = ["k"]\n',
        b'[[grant]]\ntool = "shell"\nmode = "allow"\n'
        b'[[grant]]\ntool = "list_dir"\nmode = "deny"\npaths = ["private"]\n',
        b'[[grant]]\ntool = "shell"\nmode = "allow"\n'
        b'[[grant]]\ntool = "read_file"\nmode = "deny"\n',
        b'[[grant]]\ntool = "read_file"\nmode = "deny"\npaths = ["a/b"]\n'
        b'[[grant]]\ntool = "shell"\nmode = "allow"\n',  # the order of rules never matters
    ],
)
def test_shell_asks_while_a_read_is_denied(grants: bytes) -> None:
    """`cat secrets/key` in the sandbox reads what read_file denies: shell is never better than
    ask while the grants deny a read (decisions/brokerd-tool-table.md)."""
    for command in ("cat secrets/key", "ls", "echo hi"):
        decided = decide(
            parse_grants(grants), "shell", orjson.dumps({"command": command}).decode(), WS
        )
        assert decided.decision.mode is Mode.ASK, decided.decision
        assert "deny" in decided.decision.reason


def test_shell_with_no_read_deny_keeps_its_grant() -> None:
    grants = b'[[grant]]\ntool = "shell"\nmode = "allow"\n'
    grants += b'[[grant]]\ntool = "read_file"\nmode = "allow"\n'
    assert mode_of(grants, "shell", {"command": "cat a"}) is Mode.ALLOW


# ---- class 2: an IPv6 zone id is one more spelling of an address -------------------------------

FETCH_DENY = b"""
[[grant]]
tool = "fetch"
mode = "deny"
hosts = ["2606:4700::1111", "::1", "fe80::1"]

[[grant]]
tool = "fetch"
mode = "allow"
hosts = ["*"]
"""


@pytest.mark.parametrize(
    "url",
    [
        "http://[2606:4700::1111%25eth0]/",
        "http://[2606:4700::1111%eth0]/",
        "http://[::1%25lo]/",
        "http://[0:0::1%251]/",
        "http://[fe80::1%25eth0]:8080/",
        "HTTP://[2606:4700:0::1111%25lo]/x",
    ],
)
def test_a_zone_id_never_passes_a_deny(url: str) -> None:
    decided = decide(parse_grants(FETCH_DENY), "fetch", orjson.dumps({"url": url}).decode(), WS)
    assert decided.decision.mode is Mode.DENY, (url, decided.decision)


# ---- class 3: "always" adds no more than the call ----------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://example.org:8080/",
        "https://example.org:80/",
        "http://example.org:443/",
        "http://127.0.0.1:8000/x",
        "https://[2606:4700::1111]:8443/",
        "http://EXAMPLE.org:1/",
    ],
)
def test_always_on_a_port_adds_that_host_on_that_port_only(url: str) -> None:
    """A grant may name a port: "always" on `h:8080` grants h:8080, never every port of h."""
    from tests.support.brokerd.core import tool

    target = tool("fetch").target
    assert target is not None
    at = target({"url": url}, WS)
    rule = always_rule("fetch", at, {"url": url})
    assert rule is not None
    assert isinstance(at, HostPort)
    assert at.port is not None
    assert rule.hosts == (str(at),)
    assert decision((rule,), "fetch", HostPort(at.host, at.port + 1)).mode is Mode.ASK


@pytest.mark.parametrize(
    "url", ["http://example.org/", "https://example.org:443/", "http://example.org:80/a"]
)
def test_always_on_the_scheme_port_spells_that_port(url: str) -> None:
    port = 443 if url.startswith("https") else 80
    rule = always_rule("fetch", HostPort("example.org", port), {"url": url})
    assert rule is not None
    assert rule.hosts == (f"example.org:{port}",)


@pytest.mark.parametrize(
    "hidden", ["\x1b[2K", "\r", "\u202e", "\u200b", "\t", "\x85", "\u2028"]
)  # fmt: skip
def test_a_typed_escape_is_never_taken_for_a_hidden_character(hidden: str) -> None:
    """A command holding both the text `\\x1b` and a real hidden character: the owner's summary
    tells them apart (the typed backslash doubled), and one with the text alone is as typed."""
    from boxmaker.brokerd.tools.kind import visible

    typed = "printf '\\x1b\\u202e' "
    shown = visible(typed + hidden)
    assert shown.startswith("printf '\\\\x1b\\\\u202e' ")
    assert hidden not in shown
    assert visible(typed) == typed
