"""The egress proxy brokerd runs for one MCP server with `hosts`: an HTTP proxy on a Unix socket.

The sandbox has no network but `lo`; the bridge inside it (bridge.py) carries each connection
to its 127.0.0.1 proxy port out over this socket. Here every request is judged by hosts.py:
`CONNECT host:port` (HTTPS, any TLS) opens a tunnel, `GET http://host/...` (plain HTTP) is sent on
in origin form with `Connection: close`, so the next request (a redirect too) comes back here and
is judged again. The name is resolved here, every address checked, and the connection made to
an address that was checked (no second lookup). A refusal is a 403 whose body says why, and a
line in brokerd's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable

from boxmaker.brokerd.mcp.hosts import EgressPolicy, HostError, split_host_port
from boxmaker.brokerd.netcheck import Address, parse

MAX_HEAD_BYTES = 16 << 10
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32  # at once, per server
COPY_CHUNK = 65536
_HOP_HEADERS = frozenset(
    {b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive"}
)


class Refused(Exception):
    """The request may not go out; the message says why (it is the 403's body)."""


class EgressProxy:
    def __init__(
        self, server: str, policy: EgressPolicy, path: str, log: Callable[[str], None]
    ) -> None:
        self.server = server
        self.policy = policy
        self.path = path
        self.log = log
        self.refusals: list[str] = []  # what was refused, in order (the tests read it)
        self.reached: list[str] = []  # host:port of each connection made
        self._server: asyncio.AbstractServer | None = None
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._open: set[asyncio.Task[None]] = set()  # asyncio's server.close() leaves them open

    async def start(self, uid: int | None) -> None:
        """Listens on `path`, reachable by the sandbox's `uid` (its folder is that uid's own)."""
        self._server = await asyncio.start_unix_server(self._serve, self.path)
        os.chmod(self.path, 0o600)
        if uid is not None:
            os.chown(self.path, uid, -1)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None
        for task in list(self._open):
            task.cancel()
        for task in list(self._open):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        try:
            async with self._slots:
                await self._one(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._open.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        try:
            tunnel, host, port, forward = parse_request(head)
            addr = await self._check(host, port)
            upstream_r, upstream_w = await asyncio.wait_for(
                asyncio.open_connection(str(addr), port), CONNECT_TIMEOUT_S
            )
        except (Refused, HostError) as exc:
            self.refusals.append(str(exc))
            self.log(f"egress refused: {exc}")
            body = f"refused by brokerd's egress proxy: {exc}\n".encode()
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n")
            writer.write(b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            return
        except (OSError, TimeoutError) as exc:
            self.log(f"egress to {host}:{port} failed: {exc}")
            writer.write(
                b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            )
            await writer.drain()
            return
        self.reached.append(f"{host}:{port}")
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                upstream_w.write(forward)
                await upstream_w.drain()
            await _splice(reader, writer, upstream_r, upstream_w)
        finally:
            upstream_w.close()

    async def _check(self, host: str, port: int) -> Address:
        if why := self.policy.why_not_target(host, port):
            raise Refused(f"{host}:{port}: {why}")
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except socket.gaierror as exc:
            raise Refused(f"{host}:{port}: the name does not resolve ({exc})") from None
        addresses = [parse(str(info[4][0]).partition("%")[0]) for info in infos]
        if why := self.policy.why_not_addresses(addresses, host, port):
            raise Refused(f"{host}:{port}: {why}")
        return addresses[0]


def parse_request(head: bytes) -> tuple[bool, str, int, bytes]:
    """`(tunnel, host, port, forward)` from a proxy request's head: a CONNECT's target, or a
    plain request's absolute URL with `forward` the head to send on (origin form, no hop-by-hop
    headers, `Connection: close`)."""
    lines = head.split(b"\r\n")
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise Refused("not an HTTP proxy request") from None
    if method == "CONNECT":
        host, port = split_host_port(target)
        if port is None:
            raise Refused(f"CONNECT {target}: a port is needed")
        return True, host, port, b""
    if not target.lower().startswith("http://"):
        raise Refused(f"{method} {target[:200]}: only http:// URLs and CONNECT go through")
    rest = target[len("http://") :]
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]  # user:password@ is not the host
    host, port = split_host_port(authority)
    out = [f"{method} /{path if slash else ''} {version}".encode()]
    out += [h for h in lines[1:] if h and h.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
    out.append(b"Connection: close")
    return False, host, 80 if port is None else port, b"\r\n".join(out) + b"\r\n\r\n"


async def _splice(
    a_r: asyncio.StreamReader,
    a_w: asyncio.StreamWriter,
    b_r: asyncio.StreamReader,
    b_w: asyncio.StreamWriter,
) -> None:
    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while chunk := await src.read(COPY_CHUNK):
                dst.write(chunk)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()

    await asyncio.gather(copy(a_r, b_w), copy(b_r, a_w))
