"""netcheck and htmltext on their own: the address kinds and the text extraction edge cases."""

from __future__ import annotations

import pytest

from boxmaker.brokerd import netcheck
from boxmaker.brokerd.tools.htmltext import html_to_text


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("2002:7f00:1::", "loopback"),  # 6to4 carrying 127.0.0.1
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.0.1", "private"),
        ("fc00::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "not a public"),
        ("240.0.0.1", "reserved"),
    ],
)
def test_each_kind_of_address_is_refused(text: str, kind: str) -> None:
    reason = netcheck.why_refused(netcheck.parse(text))
    assert reason is not None
    assert kind in reason


@pytest.mark.parametrize("text", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(text: str) -> None:
    assert netcheck.why_refused(netcheck.parse(text)) is None


def test_one_bad_address_of_a_name_refuses_the_name() -> None:
    public, local = netcheck.parse("1.1.1.1"), netcheck.parse("127.0.0.1")
    assert netcheck.check([public], frozenset()) is None
    assert netcheck.check([public, local], frozenset()) is not None
    assert netcheck.check([public, local], frozenset({local})) is None
    assert netcheck.check([], frozenset()) == "the name resolved to no address"


def test_html_edge_cases() -> None:
    assert html_to_text("<p>a<script>x</p>never closed") == "a"
    assert html_to_text("<div>x<style>a{}</style>y</div>") == "xy"
    assert html_to_text("a &amp; b&nbsp;c &lt;tag&gt;") == "a & b\xa0c <tag>"
    assert html_to_text("<p>one</p><p>two</p>") == "one\n\ntwo"
    assert html_to_text("<svg><text>drawn</text></svg>kept") == "kept"
    assert html_to_text("<a href='javascript:x'>js</a>") == "js"
