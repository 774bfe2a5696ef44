"""Where an MCP server may connect: its `hosts` entries, and the egress proxy's decisions. [core]

An entry is `name`, `name:port`, an IP address, `addr:port` or `[v6]:port`. Without a port it
covers 80 and 443. A name is matched exactly (in lower case: no wildcard, no subdomain); an IP
entry is also the exact-address grant that lets a loopback or private address through on its
own ports, when the proxy is asked for that address itself (never through a name). Every
address a name resolves to is checked with netcheck, the same as `fetch`: one refused address
refuses the name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from boxmaker.brokerd import netcheck
from boxmaker.brokerd.netcheck import Address

DEFAULT_PORTS = (80, 443)
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


class HostError(ValueError):
    """A host entry or a proxy target that does not parse; the message says what was wrong."""


@dataclass(frozen=True, slots=True)
class HostEntry:
    host: str  # a lower-case name, or an address in its canonical text
    ports: tuple[int, ...]

    def __str__(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.ports == DEFAULT_PORTS else f"{shown}:{self.ports[0]}"


def parse_host(text: str) -> HostEntry:
    """One `hosts` entry."""
    host, port = split_host_port(text)
    return HostEntry(host, DEFAULT_PORTS if port is None else (port,))


def split_host_port(text: str) -> tuple[str, int | None]:
    """`(host, port)` from `host[:port]` or `[v6][:port]`, the host canonical (lower case, an
    address in ipaddress's spelling)."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise HostError(f"{text!r}: an IPv6 address in brackets lacks its ]")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise HostError(f"{text!r}: after ] only :port may follow")
        port_text = rest[1:] if rest else None
        try:
            return str(ipaddress.IPv6Address(host)), _port(text, port_text)
        except ipaddress.AddressValueError:
            raise HostError(f"{text!r}: {host!r} is not an IPv6 address") from None
    if text.count(":") > 1:
        raise HostError(f"{text!r}: write an IPv6 address in brackets, [addr] or [addr]:port")
    host, _, port_text = text.partition(":")
    port = _port(text, port_text if ":" in text else None)
    return canonical_host(text, host), port


def canonical_host(text: str, host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ipaddress.AddressValueError:
        pass
    name = host.lower().rstrip(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise HostError(f"{text!r}: {host!r} is neither an IP address nor a host name")
    if name.replace(".", "").isdigit():  # 2130706433, 127.1: a connector reads them as IPv4
        raise HostError(f"{text!r}: write an IPv4 address as four numbers, a.b.c.d")
    return name


def _port(text: str, port_text: str | None) -> int | None:
    if port_text is None:
        return None
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise HostError(f"{text!r}: the port must be a number 1 to 65535")
    return int(port_text)


class EgressPolicy:
    """The decisions of one server's egress proxy: which (host, port) it may ask for, and which
    of the addresses a name resolved to it may reach."""

    def __init__(self, entries: Iterable[HostEntry]) -> None:
        self.entries = tuple(entries)
        self._ports: dict[str, set[int]] = {}
        for entry in self.entries:
            self._ports.setdefault(entry.host, set()).update(entry.ports)

    def why_not_target(self, host: str, port: int) -> str | None:
        """None when `host:port` (already canonical) is one of the entries, else why not."""
        ports = self._ports.get(host)
        if ports is None:
            return f"{host} is not in this server's hosts"
        if port not in ports:
            return f"port {port} of {host} is not in this server's hosts ({sorted(ports)})"
        return None

    def why_not_addresses(self, addresses: Iterable[Address], host: str, port: int) -> str | None:
        """None when every address `host:port` resolved to may be reached (netcheck, as for
        `fetch`). A loopback or private address passes only when `host` IS that address and
        an entry grants it with `port`: `127.0.0.1:8080` opens that port, never another port of
        it, nor the address reached through a granted name."""
        exempt: frozenset[Address] = frozenset()
        if port in self._ports.get(host, ()):
            with contextlib.suppress(ValueError):  # a name: its addresses must be public
                exempt = frozenset({netcheck.parse(host)})
        return netcheck.check(addresses, exempt)
