"""The only socket code in loopd: a Unix-socket connection to infer.sock (M2a brief, section 2).

loopd never opens TCP; `inferproxy` does that. A `Connection` carries one request: connect,
send it whole, then receive with a timeout on each read. Closing the connection is how loopd
cancels a generation, so every path closes it. `exchange()` is one short request (/slots, /props,
the control call) read whole under one deadline, computed from an injected monotonic clock;
`short_exchange()` is the same with the limits from the config.

Failures come out as the client's own errors: a connect that fails is `ConnectFailed`
(retryable: inferproxy may be restarting), naming the socket path and the errno. A connection
dropped before the request was read (reset before any byte came, or a broken pipe while
sending) is `Refused`: that is how inferproxy refuses one over its accept budget, and
`admitted` makes such a request again as a token comes back (docs/decisions/proxy-budget.md).
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from boxmaker.loopd.config import InferenceConfig
from boxmaker.loopd.llama.errors import (
    HTTP_BODY_CAP_BYTES,
    BadResponse,
    ConnectFailed,
    HttpStatus,
    Refused,
    Stalled,
    Unanswered,
)
from boxmaker.loopd.llama.http import (
    DEFAULT_MAX_INTERIM_HEADS,
    HeadParser,
    ResponseHead,
    body_decoder,
    build_request,
)
from boxmaker.proto import NEED_DATA

Clock = Callable[[], float]
R = TypeVar("R")
RECV_BYTES = 65_536


def _errno_text(exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return f"{code}: {exc.strerror or exc}"


class Connection:
    """One request's connection to infer.sock."""

    def __init__(self, sock: socket.socket, path: Path) -> None:
        self._sock = sock
        self.path = path
        self.closed = False
        self._answered = False  # some byte came: a reset after it is an end, not a refusal

    @classmethod
    def open(cls, path: Path, timeout_s: float) -> Connection:
        """Connects to the Unix socket at `path`.

        Raises:
            ConnectFailed: naming the path and the errno, with a hint.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(os.fspath(path))
        except OSError as exc:
            sock.close()
            hint = "is inferproxy running, and is [inference] socket its --listen path?"
            if isinstance(exc, TimeoutError):
                what = f"no answer in {timeout_s * 1000:.0f} ms"
            else:
                what = _errno_text(exc)
            raise ConnectFailed(f"cannot connect to {path} ({what}); {hint}") from None
        return cls(sock, path)

    def send(self, data: bytes, timeout_s: float) -> None:
        """Sends all of `data`.

        Raises:
            Refused: the peer dropped the connection unread (reset, broken pipe).
            ConnectFailed: another error.
            Stalled: the peer took nothing for `timeout_s`.
        """
        self._sock.settimeout(timeout_s)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise Stalled(
                f"the server took no request bytes for {timeout_s * 1000:.0f} ms"
            ) from None
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise self._refused(exc) from None
        except OSError as exc:
            raise ConnectFailed(
                f"the connection to {self.path} broke while sending ({_errno_text(exc)})"
            ) from None

    def _refused(self, exc: OSError) -> Refused:
        return Refused(
            f"{self.path} dropped the connection without reading the request "
            f"({_errno_text(exc)}): inferproxy over its accept limits, or no llama-server behind it"
        )

    def recv(self, timeout_s: float) -> bytes | None:
        """The next bytes: b"" at EOF (a reset after some bytes counts as EOF), None when
        `timeout_s` passed.

        Raises:
            Refused: a reset before any byte: the request was never read (a Unix socket resets
                a connection closed with unread data; one that read it ends in a plain EOF).
        """
        self._sock.settimeout(max(timeout_s, 0.001))
        try:
            data = self._sock.recv(RECV_BYTES)
        except TimeoutError:
            return None
        except (ConnectionResetError, BrokenPipeError) as exc:
            if not self._answered:
                raise self._refused(exc) from None
            return b""
        self._answered = self._answered or bool(data)
        return data

    def close(self) -> None:
        """Closes the connection (which cancels a generation in flight). Idempotent."""
        if not self.closed:
            self.closed = True
            self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class Response:
    head: ResponseHead
    body: bytes

    @property
    def status(self) -> int:
        return self.head.status


def short_exchange(
    config: InferenceConfig, method: str, target: str, body: bytes | None, clock: Clock
) -> Response:
    """`exchange` within [inference]'s `control_timeout_ms` and size caps: a /slots poll, the
    control call, an info call."""
    return exchange(
        config.socket,
        method,
        target,
        body,
        timeout_ms=config.control_timeout_ms,
        max_header_bytes=config.max_header_bytes,
        max_body_bytes=config.max_body_bytes,
        max_interim_heads=config.max_interim_heads,
        clock=clock,
    )


def short_call(
    config: InferenceConfig,
    method: str,
    target: str,
    body: bytes | None,
    clock: Clock,
    sleep: Callable[[float], None] = time.sleep,
) -> Response:
    """`short_exchange` that wants a 200: any other status is HttpStatus, its body cut to
    HTTP_BODY_CAP_BYTES (the info calls, the slot files).

    A connection dropped unread is how inferproxy refuses one over its accept budget, which
    loopd's own burst of calls can empty (a self-test after many turns, the keeper's call beside
    each completion): a short call that ended before any byte of an answer (a short call is
    safe to repeat) is made again every `refused_retry_ms` until `load_wait_ms` has passed (real
    time), then the last error is raised (docs/decisions/proxy-budget.md).
    """
    resp = admitted(
        lambda: short_exchange(config, method, target, body, clock),
        config.refused_retry_ms,
        config.load_wait_ms,
        unanswered=True,
        sleep=sleep,
    )
    if resp.status != 200:
        raise HttpStatus(resp.status, resp.body[:HTTP_BODY_CAP_BYTES].decode("utf-8", "replace"))
    return resp


def admitted(
    attempt: Callable[[], R],
    every_ms: int,
    within_ms: int,
    *,
    retry: Callable[[], bool] = lambda: True,
    unanswered: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """`attempt()`, made again every `every_ms` while it raises Refused (inferproxy dropped the
    connection unread: over its accept budget, a token comes back soon) and `retry()` says it
    may be, until `within_ms` has passed (real time); then the last Refused. With `unanswered`,
    any connection that ended before an answer's first byte too: something between loopd and
    inferproxy (verify-device's tee) turns a refusal into a plain close."""
    give_up = time.monotonic() + within_ms / 1000
    retried = Unanswered if unanswered else Refused
    while True:
        try:
            return attempt()
        except retried:
            left = give_up - time.monotonic()
            if left <= 0 or not retry():
                raise
            sleep(min(every_ms / 1000, left))


def exchange(
    path: Path,
    method: str,
    target: str,
    body: bytes | None,
    *,
    timeout_ms: int,
    max_header_bytes: int,
    max_body_bytes: int,
    max_interim_heads: int = DEFAULT_MAX_INTERIM_HEADS,
    clock: Clock = time.monotonic,
) -> Response:
    """One short request on its own connection, the whole response read within `timeout_ms`.

    Raises:
        ConnectFailed: no connection, or it closed before any byte of a response.
        Stalled: the response was not complete within `timeout_ms`.
        BadResponse: a malformed or over-long head or body, or a body cut short.
    """
    deadline = clock() + timeout_ms / 1000
    what = f"{method} {target}"
    with Connection.open(path, timeout_ms / 1000) as conn:
        conn.send(build_request(method, target, body), timeout_ms / 1000)
        parser = HeadParser(max_header_bytes, max_interim_heads)

        def read() -> bytes:
            data = conn.recv(deadline - clock())
            if data is None:
                raise Stalled(f"{what}: no complete answer within {timeout_ms} ms")
            return data

        while (head := parser.next_head()) is NEED_DATA:
            parser.receive_data(read())
        assert isinstance(head, ResponseHead)
        decoder = body_decoder(head, max_body_bytes)
        parts = [decoder.feed(parser.rest)]
        while not decoder.done:
            data = read()
            if not data:
                try:
                    decoder.end()
                except BadResponse as exc:
                    raise type(exc)(f"{what}: {exc}") from None
                break
            parts.append(decoder.feed(data))
        return Response(head, b"".join(parts))
