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


# IPv6 prefixes whose last 32 bits are an IPv4 address a host or a gateway may reach: the
# IPv4-compatible ::/96 (deprecated, still routed by some stacks), SIIT's ::ffff:0:0:0/96 and
# NAT64's 64:ff9b::/96 and 64:ff9b:1::/48.
_EMBEDDING = tuple(
    ipaddress.IPv6Network(n) for n in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48")
)


def embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (v4-mapped, v4-compatible, SIIT, 6to4, NAT64,
    Teredo's client), or None. `::` and `::1` are themselves, not 0.0.0.0 and 0.0.0.1."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    if int(addr) > 1 and any(addr in net for net in _EMBEDDING):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def plain(addr: Address) -> Address:
    # ::ffff:127.0.0.1 and friends reach the IPv4 address they carry: judge that one.
    if isinstance(addr, ipaddress.IPv6Address):
        return embedded_v4(addr) or addr
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
