"""HTTP/1.1 for loopd's client side, sans-IO: request bytes out, response head and body in. [core]

loopd sends one request per connection with `Connection: close` (M2a brief, section 2), so the
client needs no keep-alive, no pipelining and no request state machine. What it needs is here:

- `build_request(method, target, body)`: the request bytes. A body is always JSON. Every request
  says `Accept-Encoding: identity`: the client reads no content coding.
- `HeadParser`: `receive_data(b)` (b"" for EOF), then `next_head()` -> `ResponseHead` or
  `NEED_DATA` (h11's verbs, STYLE.md R2). The head is the status line and the header lines up to
  the blank line; `rest` holds the bytes after it. Informational (1xx) heads are skipped, but
  they count: their bytes against the one head cap, their number against `max_interim_heads`,
  so a peer that sends `100 Continue` for ever is stopped. `101 Switching Protocols` is an error
  (the client never asks to upgrade). Header names are case-insensitive and may repeat (a
  llama-server router forwards `Connection: close` twice). Lines end in CRLF; a bare LF is
  accepted too (RFC 9112 section 2.2 allows it).
- `body_decoder(head, max_body_bytes)`: the framing of the body that follows (RFC 9112 section
  6.3): none for 204 and 304; chunked when Transfer-Encoding ends in chunked (through
  `_fast.chunked`); Content-Length; otherwise everything up to the close. Each decoder has
  `feed(bytes) -> bytes`, `done`, and `end()` for EOF, which raises `TruncatedBody` when the
  framing says more was due. A Content-Encoding other than identity is refused.

Limits live here, from config (STYLE.md R2): the heads are capped (16 KiB by default, h11's
default too) so a peer that never ends its head cannot make us buffer without bound, and a body
that is not a stream can be capped (4 MiB). Every breach, and every ProtocolError from the fast
decoders, is a `BadResponse` whose message says what was wrong.

Connect or protocol: a close before any byte of the response is `ConnectFailed` (retryable: the
server or the proxy went away). Once a byte has arrived the server has answered, so a broken or
cut head is a `BadResponse`, and bytes that cannot begin an HTTP/1.x status line are refused at
once, without waiting for a line end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from boxmaker._fast.chunked import ChunkedDecoder
from boxmaker.loopd.llama.errors import BadResponse, Unanswered
from boxmaker.proto import NEED_DATA, NeedData, ProtocolError

# The host name sent on a Unix socket: llama-server ignores it, HTTP/1.1 requires the header.
HOST: Final = "localhost"

# "HTTP/1.1 200 OK"; the reason phrase may be empty or missing (RFC 9112 section 4).
_STATUS_LINE_RE: Final = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([^\r\n]*))?")
# A header name is a token (RFC 9110 section 5.6.2).
_TOKEN_RE: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# What a request target may hold: a path and query, already percent-encoded.
_TARGET_RE: Final = re.compile(r"/[\x21-\x7e]*")
_HEAD_END_RE: Final = re.compile(rb"\r?\n\r?\n")
_STATUS_PREFIX: Final = b"HTTP/1."  # what every response head starts with
SHOW_BYTES: Final = 60  # how much of a bad line an error message quotes
# A server that honours `Connection: close` and no `Expect` sends no 1xx at all; a few are
# tolerated (103 Early Hints), more is a loop.
DEFAULT_MAX_INTERIM_HEADS: Final = 8


class TruncatedBody(BadResponse):
    """The connection closed before the body its framing announced was complete."""


def _show(data: bytes) -> str:
    return repr(data[:SHOW_BYTES]) + ("..." if len(data) > SHOW_BYTES else "")


# ---- requests ----------------------------------------------------------------------------------


def target(path: str, **query: str) -> str:
    """A request target: `path` with the query parameters percent-encoded, in the given order."""
    if not query:
        return path
    pairs = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in query.items())
    return f"{path}?{pairs}"


def build_request(method: str, target: str, body: bytes | None = None) -> bytes:
    """The bytes of one request on its own connection.

    Args:
        method: "GET" or "POST".
        target: an origin-form target ("/slots?model=x"), already percent-encoded.
        body: a JSON body, or None for none.

    Returns:
        The request line, Host, Content-Type and Content-Length (with a body), `Accept-Encoding:
        identity`, `Connection: close`, the blank line and the body.

    Raises:
        ValueError: a method or target that would not make a valid request line.
    """
    if method not in ("GET", "POST"):
        raise ValueError(f"method must be GET or POST, got {method!r}")
    if not _TARGET_RE.fullmatch(target):
        raise ValueError(f"target must be '/' then printable ASCII without spaces, got {target!r}")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {HOST}"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += ["Accept-Encoding: identity", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("ascii") + (body or b"")


# ---- the response head -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResponseHead:
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]  # as received; names keep their case

    def get_all(self, name: str) -> list[str]:
        """Every value of header `name` (case-insensitive), in order."""
        lower = name.lower()
        return [v for k, v in self.headers if k.lower() == lower]

    def get(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        values = self.get_all(name)
        return values[0] if values else None


class HeadParser:
    """Reads one response head, and the interim (1xx) heads before it, fed in pieces of any size."""

    def __init__(
        self, max_header_bytes: int, max_interim_heads: int = DEFAULT_MAX_INTERIM_HEADS
    ) -> None:
        """Args:
        max_header_bytes: the most bytes the heads may take together, blank lines included.
        max_interim_heads: the most 1xx heads skipped before the final one.
        """
        self._max = max_header_bytes
        self._max_interim = max_interim_heads
        self._buf = bytearray()
        self._eof = False
        self._scanned = 0  # where the search for the blank line resumes
        self._spent = 0  # bytes of the interim heads already parsed, counted against the cap
        self.interim = 0  # interim heads skipped so far
        self.received = 0  # bytes fed so far, for messages
        self.rest = b""  # the bytes after the head, once next_head() returned it

    def receive_data(self, data: bytes) -> None:
        """Adds bytes from the peer; b"" means the peer closed."""
        if not data:
            self._eof = True
        self.received += len(data)
        self._buf += data

    def next_head(self) -> ResponseHead | NeedData:
        """The final (non-1xx) response head, or NEED_DATA.

        Raises:
            ConnectFailed: the peer closed before sending any byte.
            BadResponse: the head is malformed, longer than the cap, cut by the close, or
                preceded by too many interim heads.
        """
        while True:
            start = bytes(self._buf[: len(_STATUS_PREFIX)])
            if not _STATUS_PREFIX.startswith(start):
                line = bytes(self._buf).split(b"\n", 1)[0]
                raise BadResponse(f"not an HTTP/1.x status line: {_show(line)}")
            room = self._max - self._spent  # what this head may take
            # Look back 3 bytes so a blank line cut across feeds is still found.
            match = _HEAD_END_RE.search(self._buf, max(0, self._scanned - 3))
            if match is None or match.end() > room:
                if len(self._buf) >= room:
                    raise BadResponse(self._too_long())
                if self._eof:
                    if not self.received:
                        raise Unanswered("the server closed the connection without answering")
                    raise BadResponse(
                        f"the server closed the connection after {self.received} bytes, "
                        "inside the response head"
                    )
                self._scanned = len(self._buf)
                return NEED_DATA
            head = bytes(self._buf[: match.start()])
            del self._buf[: match.end()]
            self._scanned = 0
            parsed = parse_head(head)
            if parsed.status == 101:
                raise BadResponse("101 Switching Protocols, but the client never asks to upgrade")
            if 100 <= parsed.status < 200:
                # An interim response (100 Continue, 103 Early Hints): the real one follows.
                self.interim += 1
                self._spent += match.end()
                if self.interim > self._max_interim:
                    raise BadResponse(
                        f"more than {self._max_interim} interim (1xx) heads before the response"
                    )
                continue
            self.rest = bytes(self._buf)
            self._buf.clear()
            return parsed

    def _too_long(self) -> str:
        if self.interim:
            return (
                f"response heads longer than {self._max} bytes in all "
                f"({self.interim} interim 1xx heads, then the response's)"
            )
        return f"response head longer than {self._max} bytes"


def parse_head(head: bytes) -> ResponseHead:
    """The status line and headers of a head without its blank line.

    Raises:
        BadResponse: naming the bad line.
    """
    status_line, *lines = head.replace(b"\r\n", b"\n").split(b"\n")
    match = _STATUS_LINE_RE.fullmatch(status_line)
    if match is None:
        raise BadResponse(f"not an HTTP/1.x status line: {_show(status_line)}")
    headers = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if line[:1] in (b" ", b"\t"):
            raise BadResponse(f"folded header line (obsolete, RFC 9112 5.2): {_show(line)}")
        if not colon or not _TOKEN_RE.fullmatch(name):
            raise BadResponse(f"malformed header line: {_show(line)}")
        if b"\r" in value or b"\0" in value:
            raise BadResponse(f"header {name.decode()} holds a CR or NUL: {_show(line)}")
        headers.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
    reason = (match[3] or b"").decode("latin-1")
    return ResponseHead(int(match[2]), reason, tuple(headers))


# ---- the body ----------------------------------------------------------------------------------


class BodyDecoder:
    """The body of one response: feed() the bytes after the head, then end() at EOF.

    `max_bytes` caps the decoded body (None: no cap, as for a stream, whose lines are capped by
    the SSE layer instead).
    """

    def __init__(self, max_bytes: int | None) -> None:
        self._max = max_bytes
        self.received = 0  # decoded body bytes so far
        self.done = False  # the framing says the body is complete

    def feed(self, data: bytes) -> bytes:
        """Decodes the next bytes. Returns the body bytes they complete (b"" once done).

        Raises:
            BadResponse: malformed framing, or the body went over the cap.
        """
        if self.done or not data:
            return b""
        out = self._decode(data)
        self.received += len(out)
        if self._max is not None and self.received > self._max:
            raise BadResponse(f"response body longer than {self._max} bytes")
        return out

    def end(self) -> None:
        """Called at EOF. Raises TruncatedBody unless the body was complete."""
        if not self.done:
            raise TruncatedBody(f"the connection closed {self._missing()}")

    def _decode(self, data: bytes) -> bytes:
        raise NotImplementedError

    def _missing(self) -> str:
        raise NotImplementedError


class EmptyBody(BodyDecoder):
    """204, 304: no body whatever the headers say."""

    def __init__(self) -> None:
        super().__init__(0)
        self.done = True


class LengthBody(BodyDecoder):
    def __init__(self, length: int, max_bytes: int | None) -> None:
        super().__init__(max_bytes)
        if max_bytes is not None and length > max_bytes:
            raise BadResponse(f"Content-Length {length} is over the {max_bytes}-byte body cap")
        self._left = length
        self.done = length == 0

    def _decode(self, data: bytes) -> bytes:
        out = data[: self._left]  # bytes past the length are not ours: dropped
        self._left -= len(out)
        self.done = self._left == 0
        return out

    def _missing(self) -> str:
        return f"{self._left} bytes before the end of the body (Content-Length)"


class ChunkedBody(BodyDecoder):
    def __init__(self, max_bytes: int | None) -> None:
        super().__init__(max_bytes)
        self._decoder = ChunkedDecoder()

    def _decode(self, data: bytes) -> bytes:
        try:
            out = self._decoder.feed(data)
        except ProtocolError as exc:
            raise BadResponse(f"chunked body: {exc}") from None
        self.done = self._decoder.done
        return out

    def _missing(self) -> str:
        return f"inside a chunked body, after {self.received} body bytes"


class CloseBody(BodyDecoder):
    """No length and not chunked: the body runs to the close (RFC 9112 section 6.3, rule 8)."""

    def _decode(self, data: bytes) -> bytes:
        return data

    def end(self) -> None:
        self.done = True

    def _missing(self) -> str:  # pragma: no cover - end() never fails
        return ""


def body_decoder(head: ResponseHead, max_bytes: int | None) -> BodyDecoder:
    """The decoder for the body after `head`.

    Raises:
        BadResponse: a Transfer-Encoding other than chunked, a Content-Encoding other than
            identity, or a bad or conflicting length.
    """
    if head.status in (204, 304):
        return EmptyBody()
    encodings = [c.strip().lower() for v in head.get_all("Content-Encoding") for c in v.split(",")]
    if [c for c in encodings if c and c != "identity"]:
        # Accept-Encoding: identity was sent; a compressed body would be read as garbage.
        raise BadResponse(f"unsupported Content-Encoding: {', '.join(encodings)} (identity asked)")
    codings = [c.strip().lower() for v in head.get_all("Transfer-Encoding") for c in v.split(",")]
    if codings:
        # Transfer-Encoding wins over Content-Length (RFC 9112 section 6.3, rule 3).
        if codings != ["chunked"]:
            raise BadResponse(f"unsupported Transfer-Encoding: {', '.join(codings)}")
        return ChunkedBody(max_bytes)
    lengths = {v.strip() for x in head.get_all("Content-Length") for v in x.split(",")}
    if not lengths:
        return CloseBody(max_bytes)
    if len(lengths) > 1 or not all(v.isdigit() and v.isascii() for v in lengths):
        raise BadResponse(f"bad Content-Length: {', '.join(sorted(lengths))}")
    return LengthBody(int(lengths.pop()), max_bytes)


def content_type(head: ResponseHead) -> str:
    """The media type, lowercased, without parameters ("" when there is none)."""
    value = head.get("Content-Type") or ""
    return value.split(";", 1)[0].strip().lower()
