"""The egress proxy on its own: a real Unix socket, real pages on two loopback addresses, and
the spellings a server could try to get past it."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.brokerd.mcp.egress import EgressProxy
from boxmaker.brokerd.mcp.hosts import EgressPolicy, parse_host
from tests.support.brokerd.mcp.servers import Rig, page_server

BOUND_S = 15.0  # the proxy's own waits are 10 s (HEAD_TIMEOUT_S, CONNECT_TIMEOUT_S)


class Running:
    def __init__(self, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(proxy.start(None), self.loop).result(BOUND_S)

    def ask(self, head: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(BOUND_S)
            s.connect(self.proxy.path)
            s.sendall(head)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
                if head.startswith(b"CONNECT") and b"\r\n\r\n" in data:
                    break  # a tunnel stays open: its first answer is what is judged
            return data

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self.loop).result(BOUND_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(BOUND_S)
        self.loop.close()


@pytest.fixture
def pages(rig: Rig) -> Iterator[tuple[Running, int, list[str], int, list[str]]]:
    with page_server("127.0.0.1") as (port, hits), page_server("127.0.0.2") as (port2, hits2):
        policy = EgressPolicy([parse_host(f"127.0.0.1:{port}")])
        logged: list[str] = []
        running = Running(EgressProxy("t", policy, str(rig.base / "e.sock"), logged.append))
        try:
            yield running, port, hits, port2, hits2
        finally:
            running.close()


def test_a_granted_page_is_reached_in_origin_form(
    pages: tuple[Running, int, list[str], int, list[str]],
) -> None:
    running, port, hits, _, _ = pages
    got = running.ask(
        f"GET http://127.0.0.1:{port}/a?b HTTP/1.1\r\nHost: x\r\nProxy-Connection: keep-alive"
        "\r\n\r\n".encode()
    )
    assert got.startswith(b"HTTP/1.0 200") or got.startswith(b"HTTP/1.1 200"), got[:100]
    assert b"page-3c1d" in got
    assert hits == ["/a?b"]
    tunnel = running.ask(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    assert tunnel.startswith(b"HTTP/1.1 200 Connection established")


def refused_heads(port: int, port2: int) -> list[str]:
    return [
        f"GET http://127.0.0.2:{port2}/ HTTP/1.1",
        f"GET http://127.0.0.1:{port}@127.0.0.2:{port2}/ HTTP/1.1",  # userinfo is not the host
        f"GET http://127.0.0.1:{port2}/ HTTP/1.1",
        f"GET http://localhost:{port}/ HTTP/1.1",
        f"GET http://LOCALHOST:{port}/ HTTP/1.1",
        f"GET http://[::ffff:127.0.0.1]:{port}/ HTTP/1.1",
        f"GET http://2130706433:{port}/ HTTP/1.1",
        f"GET http://0x7f.1:{port}/ HTTP/1.1",
        "GET http://127.0.0.1/ HTTP/1.1",  # port 80 is not the granted one
        "GET /relative HTTP/1.1",
        f"GET https://127.0.0.1:{port}/ HTTP/1.1",
        f"CONNECT 127.0.0.2:{port2} HTTP/1.1",
        f"CONNECT 127.0.0.1:{port2} HTTP/1.1",
        f"CONNECT [::1]:{port} HTTP/1.1",
        "CONNECT 127.0.0.1 HTTP/1.1",
        "not http at all",
    ]


@pytest.mark.parametrize("index", range(16))
def test_every_other_spelling_is_refused_and_logged(
    pages: tuple[Running, int, list[str], int, list[str]], index: int
) -> None:
    running, port, hits, port2, hits2 = pages
    head = refused_heads(port, port2)[index]
    got = running.ask(f"{head}\r\nHost: 127.0.0.1\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.1 403 Forbidden"), (head, got[:200])
    assert b"refused by brokerd's egress proxy" in got
    assert hits == []
    assert hits2 == []
    assert len(running.proxy.refusals) == 1
    assert running.proxy.reached == []


def test_the_socket_is_the_sandbox_uids_alone(rig: Rig) -> None:
    path = rig.base / "e.sock"
    running = Running(EgressProxy("t", EgressPolicy([]), str(path), lambda _: None))
    try:
        assert Path(path).stat().st_mode & 0o777 == 0o600
    finally:
        running.close()
    assert not path.exists()
