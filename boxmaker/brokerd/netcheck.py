"""Which addresses `fetch` may connect to: the public internet, and exact allowed ones. [core]

Checked on the addresses a name resolved to (every one of them), and again for each redirect,
so a name or a redirect cannot lead the broker to loopback, the LAN or a cloud metadata service.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# The cloud metadata services: link-local or private already, named so the refusal says so.
METADATA = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)


def parse(text: str) -> Address:
    """An address from its text (brackets and an IPv6 zone are refused by ipaddress itself)."""
    return ipaddress.ip_address(text)


def plain(addr: Address) -> Address:
    # ::ffff:127.0.0.1 and friends reach the IPv4 address they carry: judge that one.
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
        if addr.sixtofour is not None:
            return addr.sixtofour
        if addr.teredo is not None:
            return addr.teredo[1]
    return addr


def why_refused(addr: Address) -> str | None:
    """None for a public address, else the kind of address it is (for the refusal's message)."""
    plain_ = plain(addr)
    if addr in METADATA or plain_ in METADATA:
        return "a cloud metadata address"
    for kind, hit in (
        ("unspecified", plain_.is_unspecified),
        ("loopback", plain_.is_loopback),
        ("link-local", plain_.is_link_local),
        ("multicast", plain_.is_multicast),
        ("reserved", plain_.is_reserved),
        ("private", plain_.is_private),
    ):
        if hit:
            return f"a {kind} address"
    if not plain_.is_global:
        return "not a public address"
    return None


def check(addresses: Iterable[Address], allow: frozenset[Address]) -> str | None:
    """None when every address may be reached; else the first refusal, saying what to grant.

    All of them, not just the first: a name that resolves to one public and one private address
    could be connected to either, so it is refused whole.
    """
    found = list(addresses)
    if not found:
        return "the name resolved to no address"
    for addr in found:
        if addr in allow:
            continue
        kind = why_refused(addr)
        if kind is not None:
            exact = plain(addr)
            return (
                f"{addr} is {kind}; only a grant naming exactly {exact} allows it, "
                f"in a URL that names {exact} itself (no other spelling, no name)"
            )
    return None
