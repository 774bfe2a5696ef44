"""`fetch` against real HTTP servers on 127.0.0.1 (and ::1): what is refused, before any connect,
and what comes back when the exact address is allowed."""

from __future__ import annotations

import http.server
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from boxmaker.brokerd import netcheck
from boxmaker.brokerd.tools import fetch as fetch_mod
from boxmaker.brokerd.tools.fetch import FetchLimits, fetch
from tests.support.brokerd.fetch import PAGE, Server, body

LOCAL = netcheck.parse("127.0.0.1")


def redirect(location: str) -> Callable[..., None]:
    def handle(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", location)
        h.send_header("Content-Length", "0")
        h.end_headers()

    return handle


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    srv.routes["/page"] = body(PAGE)
    yield srv
    srv.close()


def url(srv: Server, path: str = "/page", host: str = "127.0.0.1") -> str:
    return f"http://{host}:{srv.port}{path}"


def test_a_loopback_server_is_refused_without_the_exact_allow(server: Server) -> None:
    result = fetch(url(server))
    assert result.error is not None
    assert "127.0.0.1 is a loopback address" in result.error
    assert "grant naming exactly 127.0.0.1" in result.error
    assert server.hits == []
    assert not result.to_response().untrusted  # nothing came from a server
    other = fetch(url(server), allow=frozenset({netcheck.parse("127.0.0.2")}))
    assert other.error is not None
    assert server.hits == []


def test_the_exact_allow_lets_it_through_as_untrusted_text(server: Server) -> None:
    result = fetch(url(server), allow=frozenset({LOCAL}))
    assert result.error is None, result.error
    assert result.status == 200
    assert result.hosts == ("127.0.0.1",)
    assert server.hits == [("/page", f"127.0.0.1:{server.port}")]
    response = result.to_response()
    assert response.untrusted
    assert not response.truncated
    assert "Heading" in response.content


def test_html_becomes_readable_text_without_scripts_or_styles(server: Server) -> None:
    text = fetch(url(server), allow=frozenset({LOCAL})).text
    assert "\n\n\n" not in text  # blocks apart by one blank line at most
    assert [line for line in text.splitlines() if line] == [
        "Hello page",
        "Heading",
        "First paragraph with a link <https://example.org/x>.",
        "- one",
        "- two",
    ]
    for gone in ("SCRIPT-TEXT", "color:red", "NOSCRIPT-TEXT", "<p>", "<h1>"):
        assert gone not in text


def test_a_redirect_to_loopback_from_an_allowed_host_is_refused(server: Server) -> None:
    other = Server()
    try:
        other.routes["/secret"] = body(b"internal")
        server.routes["/go"] = redirect(f"http://127.0.0.1:{other.port}/secret")
        server.routes["/go6"] = redirect(f"http://[::1]:{other.port}/secret")
        server.routes["/meta"] = redirect("http://169.254.169.254/latest/meta-data/")
        # The first server is granted by a name that is 127.0.0.1 in IPv4-mapped form, so the
        # grant is exact for it alone; its redirect to plain 127.0.0.1 is then checked afresh.
        allow = frozenset({netcheck.parse("::ffff:127.0.0.1")})
        assert fetch(url(server, "/go"), allow=allow).error is not None
        allowed = frozenset({LOCAL})
        for path, want in (("/go6", "::1 is a loopback"), ("/meta", "metadata")):
            result = fetch(url(server, path), allow=allowed)
            assert result.error is not None
            assert want in result.error
            assert result.hosts == ("127.0.0.1",)  # the first hop only
        assert other.hits == []
    finally:
        other.close()


def test_redirects_are_followed_and_bounded(server: Server) -> None:
    server.routes["/r1"] = redirect("/r2")
    server.routes["/r2"] = redirect(url(server))
    ok = fetch(url(server, "/r1"), allow=frozenset({LOCAL}))
    assert ok.error is None
    assert ok.url == url(server)
    server.routes["/loop"] = redirect("/loop")
    looped = fetch(url(server, "/loop"), FetchLimits(max_redirects=3), frozenset({LOCAL}))
    assert looped.error == "more than 3 redirects"
    assert len([h for h in server.hits if h[0] == "/loop"]) == 4


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("http://localhost:{port}/page", "loopback"),
        ("http://[::1]:{port}/page", "::1 is a loopback"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://10.0.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://0.0.0.0:{port}/", "unspecified"),
        ("http://[::ffff:127.0.0.1]:{port}/", "loopback"),
        ("http://224.0.0.1/", "multicast"),
        ("http://100.64.0.1/", "not a public"),
        ("http://2130706433:{port}/", "127.0.0.1 is a loopback"),  # the resolver's reading
    ],
)
def test_addresses_are_refused_before_any_connect(server: Server, target: str, why: str) -> None:
    tried: list[tuple[str, int]] = []

    def connect(address: tuple[str, int], timeout: float) -> socket.socket:
        tried.append(address)
        return socket.create_connection(address, timeout=timeout)

    result = fetch(target.format(port=server.port), connect=connect)
    assert result.error is not None
    assert why in result.error
    assert tried == []
    assert server.hits == []


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("file:///etc/passwd", "scheme 'file'"),
        ("ftp://example.org/x", "scheme 'ftp'"),
        ("data:text/plain,hello", "scheme 'data'"),
        ("gopher://127.0.0.1/", "scheme 'gopher'"),
        ("//example.org/x", "scheme '(none)'"),
        ("http:///nohost", "names no host"),
        ("http://user:pw@127.0.0.1/", "user name or password"),
        ("http://127.0.0.1:99999/", "not a URL"),
    ],
)
def test_urls_fetch_cannot_follow_are_refused(target: str, why: str) -> None:
    result = fetch(target, allow=frozenset({LOCAL}))
    assert result.error is not None
    assert why in result.error


def test_a_one_megabyte_page_is_cut_at_the_cap(server: Server) -> None:
    server.routes["/big"] = body(b"a" * (1 << 20), "text/plain")
    result = fetch(url(server, "/big"), FetchLimits(max_bytes=100_000), frozenset({LOCAL}))
    assert result.cut
    assert len(result.text) == 100_000
    assert result.to_response().truncated
    whole = fetch(url(server, "/big"), FetchLimits(max_bytes=2 << 20), frozenset({LOCAL}))
    assert not whole.cut
    assert len(whole.text) == 1 << 20


def test_a_slow_server_hits_the_time_cap(server: Server) -> None:
    stop = threading.Event()

    def drip(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.end_headers()
        while not stop.wait(0.05):
            h.wfile.write(b"x")
            h.wfile.flush()

    def silent(h: http.server.BaseHTTPRequestHandler) -> None:
        stop.wait(10)

    server.routes["/drip"] = drip
    server.routes["/silent"] = silent
    try:
        for path in ("/drip", "/silent"):
            started = time.monotonic()
            result = fetch(url(server, path), FetchLimits(timeout_ms=600), frozenset({LOCAL}))
            assert time.monotonic() - started < 3
            assert result.error == "the time cap passed"
    finally:
        stop.set()


def test_a_binary_body_is_refused_as_not_text(server: Server) -> None:
    server.routes["/bin"] = body(b"\x00\x01", "application/octet-stream")
    result = fetch(url(server, "/bin"), allow=frozenset({LOCAL}))
    assert result.error is not None
    assert "not text" in result.error
    assert result.to_response().untrusted  # a server answered


def test_ipv6_loopback_allowed_exactly() -> None:
    srv = Server(socket.AF_INET6, "::1")
    srv.routes["/page"] = body(b"six", "text/plain")
    try:
        assert fetch(f"http://[::1]:{srv.port}/page").error is not None
        ok = fetch(f"http://[::1]:{srv.port}/page", allow=frozenset({netcheck.parse("::1")}))
        assert ok.text == "six"
        assert srv.hits == [("/page", f"[::1]:{srv.port}")]
    finally:
        srv.close()


def test_the_tool_call_checks_its_arguments() -> None:
    from tests.support.brokerd.core import decide

    for bad in ('{"url": 3}', '{"url": "http://a.org/", "x": 1}', "{}", '"http://a.org/"'):
        d = decide((), "fetch", bad, "/ws").decision
        assert d.reason.startswith("bad request: fetch: "), d
    assert fetch_mod.host_of("HTTP://Example.ORG.:8/x") == "example.org"


PUBLIC = "93.184.215.14"  # what the stand-in resolver answers for the test names
connected: list[tuple[str, int]] = []


def to_local(address: tuple[str, int], timeout: float) -> socket.socket:
    """fetch's connect, for names the stand-in resolver gives a public address: records the
    checked address fetch connects to, and connects to the local server instead."""
    connected.append(address)
    return socket.create_connection(("127.0.0.1", address[1]), timeout=timeout)


def test_the_checked_address_is_the_one_connected_to(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a name that answers a checked address first and another one later. The
    resolver is the one stand-in here (no DNS server runs in the tests): it answers 127.0.0.1
    once, then 10.0.0.1; fetch asks it once, connects to the checked address and sends the name as
    Host. (A name never reaches loopback: the public address answered first stands for the
    server, which the connect function maps to the local one.)"""
    answers = iter([PUBLIC, "10.0.0.1", "10.0.0.1"])
    asked: list[str] = []
    real = socket.getaddrinfo

    def resolver(host: str, port: int, *args: Any, **kw: Any) -> list[Any]:
        if host != "rebind.test":
            return list(real(host, port, *args, **kw))
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    result = fetch(f"http://rebind.test:{server.port}/page", connect=to_local)
    assert result.error is None, result.error
    assert asked == ["rebind.test"]
    assert connected == [(PUBLIC, server.port)]
    assert server.hits == [("/page", f"rebind.test:{server.port}")]


def test_https_goes_to_the_checked_address_with_the_name_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS to the pinned address: SNI and the certificate check use the name, so a certificate
    for another name fails even though the address is the same (openssl makes a real one)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    make = "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1"
    names = "-subj /CN=pinned.test -addext subjectAltName=DNS:pinned.test"
    subprocess.run(
        ["openssl", *make.split(), *names.split(), "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    srv = Server()
    srv.routes["/page"] = body(b"over tls", "text/plain")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    srv.httpd.socket = server_tls.wrap_socket(srv.httpd.socket, server_side=True)
    real = socket.getaddrinfo

    def resolver(host: str, port: int, *args: Any, **kw: Any) -> list[Any]:
        if host.endswith(".test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC, port))]
        return list(real(host, port, *args, **kw))

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    client_tls = ssl.create_default_context(cafile=str(cert))
    try:
        ok = fetch(f"https://pinned.test:{srv.port}/page", connect=to_local, tls=client_tls)
        assert ok.error is None, ok.error
        assert ok.text == "over tls"
        assert srv.hits == [("/page", f"pinned.test:{srv.port}")]
        wrong = fetch(f"https://other.test:{srv.port}/page", connect=to_local, tls=client_tls)
        assert wrong.error is not None
        assert "certificate" in wrong.error.lower()
        assert len(srv.hits) == 1
    finally:
        srv.close()


def test_the_approval_summary_names_the_host_and_the_whole_url() -> None:
    text = fetch_mod.summary({"url": "https://Evil.example/c?d=secret"})
    assert text == "GET from evil.example: https://Evil.example/c?d=secret"
    assert "{url: string}" in fetch_mod.summary({"url": 1})


# ---- class 2 (issue 27): grants compare the things they name, not their spellings -------------


def _brokerd_fetch(grants: str, urls: list[str], server: Server) -> list[dict[str, Any]]:
    """Each URL fetched through a real brokerd with `grants`; the results' bodies."""
    from tests.support.brokerd.rig import Rig, remove, short_base

    base = short_base()
    rig = Rig(base, grants_text=grants)
    try:
        rig.start()
        return [rig.call("fetch", {"url": u}) for u in urls]
    finally:
        rig.stop()
        remove(base)


@pytest.mark.parametrize(
    "spelling",
    [
        "2130706433",  # decimal
        "0x7f000001",  # hex
        "0177.0.0.1",  # octal
        "127.1",  # short
        "127.0.1",
        "0x7f.0.0.1",
        "[::ffff:127.0.0.1]",  # IPv4-mapped IPv6
        "[::ffff:7f00:1]",
        "127.0.0.1.",  # trailing dot
    ],
)
def test_a_deny_on_an_address_holds_for_every_spelling_of_it(server: Server, spelling: str) -> None:
    """`deny 127.0.0.1` with every other host allowed: no spelling of the address reaches it."""
    grants = (
        '[[grant]]\ntool = "fetch"\nmode = "allow"\nhosts = ["*"]\n\n'
        '[[grant]]\ntool = "fetch"\nmode = "deny"\nhosts = ["127.0.0.1"]\n'
    )
    (got,) = _brokerd_fetch(grants, [url(server, host=spelling)], server)
    assert got["content"].startswith("error: denied"), got
    assert server.hits == []


@pytest.mark.parametrize(
    "spelling",
    ["localhost", "localhost.", "LOCALHOST", "127.1", "2130706433", "0x7f000001",
     "[::ffff:127.0.0.1]", "127.0.0.1.", "localtest.me"],
)  # fmt: skip
def test_only_the_exact_granted_address_reaches_loopback(server: Server, spelling: str) -> None:
    """With 127.0.0.1 granted, only `http://127.0.0.1:P/` reaches it: a name that resolves to it,
    and any other spelling of it, is refused before any connect."""
    grants = (
        '[[grant]]\ntool = "fetch"\nmode = "allow"\nhosts = ["127.0.0.1"]\n\n'
        '[[grant]]\ntool = "fetch"\nmode = "allow"\nhosts = ["*"]\n'
    )
    exact, other = _brokerd_fetch(grants, [url(server), url(server, host=spelling)], server)
    assert "Heading" in exact["content"], exact
    assert server.hits == [("/page", f"127.0.0.1:{server.port}")]
    assert "Heading" not in other["content"], other
    assert len(server.hits) == 1


@pytest.mark.parametrize(
    ("denied", "spelling"),
    [
        ("localhost", "localhost."),
        ("localhost", "LocalHost"),
        ("evil.example", "EVIL.example."),
        ("xn--bcher-kva.example", "bücher.example"),  # IDNA
        ("bücher.example", "xn--bcher-kva.example"),
        ("93.184.213.14", "93.184.54542"),
        ("93.184.213.14", "1572394254"),
    ],
)
def test_a_deny_on_a_name_holds_for_its_other_spellings(denied: str, spelling: str) -> None:
    """The grants parser and the URL's host normalise the same way, once."""
    from tests.support.brokerd.core import decide, parse_grants

    rules = parse_grants(
        (
            '[[grant]]\ntool = "fetch"\nmode = "allow"\nhosts = ["*"]\n\n'
            f'[[grant]]\ntool = "fetch"\nmode = "deny"\nhosts = ["{denied}"]\n'
        ).encode()
    )
    d = decide(rules, "fetch", f'{{"url": "http://{spelling}/x"}}', "/ws")
    assert str(d.decision.mode) == "deny", d


@pytest.mark.parametrize(
    "spelling", ["127.1", "2130706433", "0x7f.0.0.1", "localhost", "[::ffff:127.0.0.1]"]
)
def test_a_redirect_to_another_spelling_of_a_granted_address_is_refused(
    server: Server, spelling: str
) -> None:
    """The exact-spelling rule holds at every hop: a redirect from the granted address to
    another spelling of it (or a name for it) is refused before any connect."""
    server.routes["/hop"] = redirect(url(server, host=spelling))
    result = fetch(url(server, "/hop"), allow=frozenset({LOCAL}))
    assert result.error is not None
    assert "is a loopback address; only a grant naming exactly 127.0.0.1" in result.error
    assert server.hits == [("/hop", f"127.0.0.1:{server.port}")]
