"""The `fetch` tool: one GET over HTTP(S), made by brokerd, to an address checked first.

The name is resolved once, every address it gave is checked (netcheck), and the connection goes
to the checked address itself, with the name in the Host header and in TLS's SNI and certificate
check: a DNS answer that changes between the check and the connect (rebinding) changes nothing.
Redirects are followed here, each one checked the same way, up to a count. The body is read up to
a size cap within one deadline for the whole fetch (a watchdog shuts the socket when it passes,
so a server that drips bytes cannot stretch it), and turned into text. The result is untrusted.

Addresses: a loopback, private or link-local address is reached only when the URL names that
exact address in its plain form AND a grant that is not deny names it on the URL's port
(`http://127.0.0.1:8080/` with `hosts = ["127.0.0.1:8080"]`, or `["127.0.0.1"]` for every port
of it): never through a name (localhost, or any name that resolves to it) nor another spelling
(127.1, 2130706433). Every resolved address a deny names (on that port, or on every port) is
refused, whatever name led there. The row at the end is fetch's in the table of tools.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urljoin, urlsplit

from boxmaker._config.kinds import integer
from boxmaker._config.walker import check_fields
from boxmaker.brokerd import netcheck
from boxmaker.brokerd.targets import (
    BadTarget,
    HostPort,
    host_port,
    names_address_exactly,
    normal_host,
    scheme_port,
    url_host,
    url_host_port,
)
from boxmaker.brokerd.tools.htmltext import html_to_text
from boxmaker.brokerd.tools.kind import Args, BadArguments, Context, GrantKind, Target, Tool
from boxmaker.proto.tool import ResultClass, ToolResponse, ToolSchema

REDIRECTS = frozenset({301, 302, 303, 307, 308})
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
HTML_TYPES = ("text/html", "application/xhtml+xml")
CHUNK = 65536
HTML_GRACE_S = 2.0  # past the fetch's own deadline, for turning its HTML into text

Connect = Callable[[tuple[str, int], float], socket.socket]
HopCheck = Callable[[str], str | None]  # a redirect's URL -> None, or why it is not followed
# An address a grant names: on every port (the address alone), or on one (address, port).
Granted = netcheck.Address | tuple[netcheck.Address, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchLimits:
    """fetch's limits, and its config section `[broker.fetch]` (its row says so)."""

    # of the body read; the rest is not read
    max_bytes: Annotated[int, integer(1 << 10, 1 << 30, "bytes")] = 2 << 20
    # the whole fetch, redirects included
    timeout_ms: Annotated[int, integer(100, 600_000, "milliseconds")] = 15_000
    max_redirects: Annotated[int, integer(0, 20, "redirects")] = 5

    def __post_init__(self) -> None:
        check_fields(self, "fetch limit")


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One fetch. `error` set means nothing usable came back; `hosts` are the hosts connected to
    (in order: the first, then each redirect's), which taint records as fetched."""

    url: str
    text: str = ""
    status: int | None = None
    cut: bool = False
    error: str | None = None
    hosts: tuple[str, ...] = ()

    def to_response(self, class_: ResultClass = ResultClass.PUBLIC) -> ToolResponse:
        if self.error is not None:
            content = f"fetch {self.url}: {self.error}"
        else:
            note = "; cut at the size cap" if self.cut else ""
            content = f"[{self.url}: HTTP {self.status}{note}]\n{self.text}"
        # Anything a server sent is untrusted, an error page too; a refusal made here is not.
        return ToolResponse(content, class_, untrusted=bool(self.hosts), truncated=self.cut)


class Refused(Exception):
    """The fetch stops here; the message is the result's error."""


def host_of(url: str) -> str | None:
    """The host a URL names, normalised, or None: what taint compares with earlier fetches."""
    try:
        return url_host(url)
    except BadTarget:
        return None


@dataclass(frozen=True, slots=True)
class FetchArgs:
    """A `fetch` call's arguments, parsed once (the row's `parse`)."""

    url: str


def describe(call: FetchArgs) -> str:
    """What an approval prompt shows for a `fetch` call: the host apart, then the whole URL (a
    query string is where data would leave)."""
    return f"GET from {host_of(call.url) or '(no host)'}: {call.url}"


def summary(args: Any) -> str:
    """`describe` of raw arguments (or what is wrong with them): for a caller without a row."""
    try:
        return describe(parse_arguments(args))
    except BadArguments as err:
        return str(err)


def parse_arguments(args: Any) -> FetchArgs:
    if not isinstance(args, dict) or set(args) != {"url"} or not isinstance(args["url"], str):
        raise BadArguments("the arguments must be {url: string}")
    return FetchArgs(args["url"])


def _resolve(host: str, port: int) -> list[netcheck.Address]:
    try:
        return [netcheck.parse(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise Refused(f"cannot resolve {host}: {err.strerror}") from None
    seen: list[netcheck.Address] = []
    for info in infos:
        addr = netcheck.parse(str(info[4][0]).split("%")[0])
        if addr not in seen:
            seen.append(addr)
    return seen


def _target(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, request target) of a URL fetch may follow, or Refused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise Refused(f"not a URL fetch can follow ({err})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused(f"the scheme {scheme or '(none)'!r} is refused; give an http or https URL")
    if not parts.hostname:
        raise Refused("the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise Refused("a URL with a user name or password is refused")
    path = parts.path or "/"
    return (
        scheme,
        parts.hostname,
        scheme_port(scheme, port) or 80,  # http or https here: never None
        (f"{path}?{parts.query}" if parts.query else path),
    )


def _connect(address: tuple[str, int], timeout: float) -> socket.socket:
    return socket.create_connection(address, timeout=timeout)


def fetch(
    url: str,
    limits: FetchLimits | None = None,
    allow: frozenset[Granted] = frozenset(),
    *,
    connect: Connect = _connect,
    tls: ssl.SSLContext | None = None,
    hop_ok: HopCheck | None = None,
    denied: frozenset[Granted] = frozenset(),
) -> FetchResult:
    """GETs `url`; every failure is a FetchResult with `error`, never an exception. `hop_ok`
    judges each redirect's URL before it is followed (brokerd: the grants of its host); `allow`
    are the addresses (each on every port, or `(address, port)` on that one) a URL naming them
    exactly may reach though netcheck refuses them; `denied` those never connected to (a deny
    names them)."""
    limits = limits or FetchLimits()
    deadline = time.monotonic() + limits.timeout_ms / 1000
    hosts: list[str] = []
    current = url
    try:
        for _ in range(limits.max_redirects + 1):
            status, location, body, cut, ctype = _one(
                current, deadline, limits.max_bytes, (allow, denied), connect, tls, hosts
            )
            if status in REDIRECTS and location:
                current = urljoin(current, location)
                if hop_ok is not None and (why := hop_ok(current)) is not None:
                    raise Refused(why)
                continue
            text = _as_text(body, ctype, lambda: time.monotonic() >= deadline + HTML_GRACE_S)
            return FetchResult(current, text, status, cut, None, tuple(hosts))
        raise Refused(f"more than {limits.max_redirects} redirects")
    except Refused as err:
        return FetchResult(current, error=str(err), hosts=tuple(hosts))


def _one(
    url: str,
    deadline: float,
    max_bytes: int,
    grants: tuple[frozenset[Granted], frozenset[Granted]],
    connect: Connect,
    tls: ssl.SSLContext | None,
    hosts: list[str],
) -> tuple[int, str | None, bytes, bool, str]:
    scheme, host, port, target = _target(url)
    allow, denied = grants
    addresses = _resolve(host, port)
    for addr in addresses:
        if {addr, netcheck.plain(addr), (addr, port), (netcheck.plain(addr), port)} & denied:
            raise Refused(f"denied: a grant denies an address {host} resolves to")
    exact = frozenset(
        a
        for a in addresses
        if (a in allow or (a, port) in allow) and names_address_exactly(host, str(a))
    )
    refusal = netcheck.check(addresses, exact)
    if refusal is not None:
        raise Refused(refusal)
    left = deadline - time.monotonic()
    if left <= 0:
        raise Refused("the time cap passed")
    try:
        sock = connect((str(addresses[0]), port), left)
    except OSError as err:
        raise Refused(f"cannot connect to {addresses[0]} port {port}: {err}") from None
    try:
        hosts.append(normal_host(host))
    except BadTarget:
        hosts.append(host)
    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (sock,))
    watchdog.start()
    try:
        if scheme == "https":
            context = tls or ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPConnection(host, port)
        conn.sock = sock  # already connected, to the checked address: no second lookup
        conn.request("GET", target, headers=_HEADERS)
        resp = conn.getresponse()
        if resp.status in REDIRECTS:
            return resp.status, resp.getheader("Location"), b"", False, ""
        body, cut = _read(resp, max_bytes)
        if time.monotonic() >= deadline:  # the watchdog's shutdown reads as an end of body
            raise Refused("the time cap passed")
        return resp.status, None, body, cut, resp.getheader("Content-Type", "text/plain")
    except (OSError, http.client.HTTPException) as err:
        late = time.monotonic() >= deadline
        raise Refused("the time cap passed" if late else f"{type(err).__name__}: {err}") from None
    finally:
        watchdog.cancel()
        sock.close()


_HEADERS = {
    "User-Agent": "boxmaker-fetch/0.1",
    "Accept": "text/html, text/plain;q=0.9, */*;q=0.1",
    "Accept-Encoding": "identity",
    "Connection": "close",
}


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _read(resp: http.client.HTTPResponse, cap: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    while size <= cap:
        chunk = resp.read1(CHUNK)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)[:cap], True


def _as_text(body: bytes, ctype: str, out_of_time: Callable[[], bool] | None = None) -> str:
    kind, _, params = ctype.partition(";")
    kind = kind.strip().lower()
    if not kind.startswith(TEXT_TYPES) and not kind.endswith(("+json", "+xml")):
        raise Refused(f"the content type {kind!r} is not text; fetch reads text and HTML only")
    charset = "utf-8"
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    try:
        text = body.decode(charset, "replace")
    except LookupError:
        text = body.decode("utf-8", "replace")
    return html_to_text(text, out_of_time) if kind.startswith(HTML_TYPES) else text


def _addresses(ctx: Context, denying: bool) -> frozenset[Granted]:
    """The addresses fetch's rules name (each with its port, when the entry names one): those
    of deny rules, or of the others."""
    found: set[Granted] = set()
    for r in ctx.rules:
        if r.tool == NAME and (str(r.mode) == "deny") == denying:
            for h in r.hosts:
                with contextlib.suppress(BadTarget, ValueError):  # "*", or a name: judged on
                    entry = host_port(h)  # what it resolves to
                    addr = netcheck.parse(entry.host)
                    found.add(addr if entry.port is None else (addr, entry.port))
    return frozenset(found)


def _always(target: Target, args: Args) -> tuple[str, str] | str:
    """That host on that port, the port spelled even when it is the scheme's own
    (`example.org:443`): never every port of a host (a rule on 127.0.0.1 alone would open
    llama-server's and inferproxy's ports too; the owner may type that rule)."""
    try:
        _target(args.get("url", ""))
    except Refused as exc:
        return f"nothing: {exc}"
    if not isinstance(target, HostPort) or target.port is None:
        return f"nothing: {target} names no port a grant could name"
    return ("hosts", str(target))


def _run(ctx: Context, target: Target, args: Args, class_: ResultClass) -> ToolResponse:
    def hop_ok(url: str) -> str | None:
        """A redirect goes to the same host, or one the grants allow: nobody can be asked
        mid-fetch, so a host that would ask (or is denied) ends the fetch, and the model can
        fetch that URL itself (then the owner is asked)."""
        try:
            to = url_host_port(url)
        except BadTarget as exc:
            return f"a redirect to {url}: {exc}"
        if to == target or str(ctx.verdict(NAME, to).mode) == "allow":
            return None
        return f"a redirect to {url}: no grant allows {to}; fetch that URL to be asked about it"

    limits, url = ctx.state(FetchLimits), ctx.arguments(FetchArgs).url
    allow, denied = _addresses(ctx, False), _addresses(ctx, True)
    result = fetch(url, limits, allow, hop_ok=hop_ok, denied=denied)
    ctx.reached = result.hosts[0] if result.hosts else None
    resp: ToolResponse = ctx.capped(result.to_response(class_))
    return resp


NAME = "fetch"
FETCH = Tool(
    ToolSchema(
        NAME,
        "Fetches a web page (http or https) and returns its readable text.",
        {
            "type": "object",
            "properties": {"url": {"type": "string", "description": "an http:// or https:// URL"}},
            "required": ["url"],
            "additionalProperties": False,
        },
    ),
    {"url": str},
    _run,
    lambda ctx, _target, _args: describe(ctx.arguments(FetchArgs)),
    GrantKind.HOSTS,
    lambda args, _ws: url_host_port(args["url"]),
    writes=True,  # a URL carries data out
    untrusted=False,  # its refusals are brokerd's; what a server sent is marked untrusted
    always=_always,
    classes=True,
    parse=parse_arguments,
    section=FetchLimits,  # and its state: the limits as read
)
