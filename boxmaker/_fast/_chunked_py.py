"""ChunkedDecoder: the body out of an HTTP/1.1 chunked transfer coding, in pure Python.

This is the readable reference twin; `_chunked_c.pyx` is the same state machine in C and the
differential tests hold the two to the same output and the same error messages.

The grammar (RFC 9112 section 7.1):

    chunked-body   = *chunk last-chunk trailer-section CRLF
    chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
    chunk-size     = 1*HEXDIG
    last-chunk     = 1*("0") [ chunk-ext ] CRLF
    chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
    trailer-section = *( field-line CRLF )

Where the RFC leaves a choice, both twins choose the same:
- Lines end in CRLF. A bare LF ends the line too, but is an error (RFC 9112 section 2.2 lets a
  recipient accept it; being strict is simpler and llama-server always sends CRLF). A CR anywhere
  but right before the LF is an error in a chunk-size line.
- chunk-size is hex in either case, leading zeros allowed, at most 2**63-1 (16 significant digits).
- Extensions are ignored: after the size, any SP/HTAB (BWS), then either the line end or ";" and
  anything without a CR. Trailing SP/HTAB with no ";" is accepted too, as h11 does.
- Trailer lines are read and dropped unchecked, up to the empty line.
- `max_line_bytes` caps each chunk-size line and each trailer line, counting its CRLF, so a peer
  that never sends a line end cannot make the decoder buffer without bound.
- Every error is found at one byte of the stream (the LF ending a bad line, the byte past the cap,
  the byte where a CRLF should be), so the error and its message do not depend on how the input
  was cut into feeds. After an error the decoder is spent: every later feed raises ChunkedError
  with the same message.
"""

import enum
import operator
import re
from typing import Final

from boxmaker.proto.errors import ChunkedError

# A chunk-size line is a few hex digits; llama-server sends no extensions and no trailers. 4 KiB
# leaves room for any real peer's extensions or trailer fields and bounds what one line can buffer.
DEFAULT_MAX_LINE_BYTES: Final = 4096

# The shortest useful cap: "0\r\n", the last chunk.
MIN_MAX_LINE_BYTES: Final = 3

# The largest chunk size: what fits in a signed 64-bit length, as in llhttp and most servers.
MAX_CHUNK_SIZE: Final = 2**63 - 1
MAX_CHUNK_SIZE_DIGITS: Final = 16

# How much of a bad line an error message quotes.
SHOW_BYTES: Final = 40

# A chunk-size line with its CRLF removed: size, BWS, then nothing, or ";" and extensions we
# ignore. `[^\r]` keeps a stray CR out; there is no LF, as the line ended at the first one.
_SIZE_LINE_RE: Final = re.compile(rb"([0-9A-Fa-f]+)[ \t]*(?:;[^\r]*)?")


class _State(enum.Enum):
    SIZE_LINE = enum.auto()  # reading "chunk-size [chunk-ext] CRLF"
    DATA = enum.auto()  # reading chunk-data; `_remaining` bytes to go
    DATA_CR = enum.auto()  # the CR after chunk-data
    DATA_LF = enum.auto()  # the LF after chunk-data
    TRAILER = enum.auto()  # reading trailer lines, up to the empty one
    DONE = enum.auto()  # the body is over; more bytes go to `unused`
    FAILED = enum.auto()  # an error was raised; every feed raises it again


# The members by plain names: in Python 3.11 `_State.DATA` costs ~150 ns (an enum class
# attribute lookup) and the loop makes several per chunk; a module global is a dict lookup.
SIZE_LINE, DATA, DATA_CR, DATA_LF, TRAILER, DONE, FAILED = _State


def _show(line: bytes) -> str:
    """A short repr of a bad line for an error message."""
    if len(line) > SHOW_BYTES:
        return repr(line[:SHOW_BYTES]) + "..."
    return repr(line)


class ChunkedDecoder:
    """Decodes one chunked body, fed in pieces of any size.

    Args:
        max_line_bytes: the longest chunk-size or trailer line accepted, its CRLF included.

    Raises:
        ValueError: max_line_bytes is less than 3 (too short for the last chunk, "0\\r\\n").
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        max_line_bytes = operator.index(max_line_bytes)
        if max_line_bytes < MIN_MAX_LINE_BYTES:
            raise ValueError(
                f"max_line_bytes must be at least {MIN_MAX_LINE_BYTES}, got {max_line_bytes}"
            )
        self._max_line_bytes = max_line_bytes
        self._state = SIZE_LINE
        self._remaining = 0  # chunk-data bytes still to come in the current chunk
        self._line = bytearray()  # the start of a line that the end of a feed cut
        self._unused = b""
        self._error = ""

    @property
    def max_line_bytes(self) -> int:
        return self._max_line_bytes

    @property
    def done(self) -> bool:
        """True once the last chunk, the trailers and the final CRLF have all been read."""
        return self._state is DONE

    @property
    def unused(self) -> bytes:
        """The bytes fed after the end of the body, kept for the caller."""
        return self._unused

    def feed(self, data: bytes) -> bytes:
        """Decodes the next piece of the encoded body.

        Args:
            data: the next bytes from the peer; b"" does nothing.

        Returns:
            The body bytes this piece completes (b"" if none). Once `done`, always b"", and the
            bytes are appended to `unused`.

        Raises:
            ChunkedError: the encoding is malformed or a line is over `max_line_bytes`; also on
                every call after one that raised.
            TypeError: data is not bytes (a subclass, bytearray or memoryview included).
        """
        if type(data) is not bytes:  # exactly bytes, as the C twin's typed argument demands
            raise TypeError(f"feed() takes bytes, not {type(data).__name__}")
        if self._state is DONE:
            self._unused += data
            return b""
        if self._state is FAILED:
            raise ChunkedError(self._error)
        try:
            return self._decode(data)
        except ChunkedError as exc:
            # any -> FAILED because the stream is broken; we cannot find the next chunk.
            self._state = FAILED
            self._error = str(exc)
            self._line.clear()
            raise

    def _decode(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos = 0
        end = len(data)
        while pos < end:
            state = self._state
            if state is DATA:
                # Most of the body goes through here: one slice per chunk (or per feed).
                take = min(self._remaining, end - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    # DATA -> DATA_CR because chunk-data is followed by CRLF.
                    self._state = DATA_CR
            elif state is DATA_CR:
                if data.startswith(b"\r\n", pos):
                    # The usual case, both bytes here: DATA_CR -> SIZE_LINE in one step.
                    pos += 2
                    self._state = SIZE_LINE
                    continue
                if data[pos] != 0x0D:
                    raise ChunkedError(
                        f"missing CRLF after chunk data: got {data[pos : pos + 1]!r}"
                    )
                pos += 1
                self._state = DATA_LF
            elif state is DATA_LF:
                if data[pos] != 0x0A:
                    got = b"\r" + data[pos : pos + 1]
                    raise ChunkedError(f"missing CRLF after chunk data: got {got!r}")
                pos += 1
                # DATA_LF -> SIZE_LINE because the next chunk (maybe the last) starts here.
                self._state = SIZE_LINE
            else:
                line, pos = self._take_line(data, pos)
                if line is None:
                    break  # the line goes on in the next feed
                if state is SIZE_LINE:
                    self._on_size_line(line)
                else:
                    self._on_trailer_line(line)
                    if self._state is DONE:
                        self._unused = data[pos:]
                        break
        # join returns the one piece itself when the whole feed was chunk data: no copy.
        return b"".join(out)

    def _take_line(self, data: bytes, pos: int) -> tuple[bytes | None, int]:
        """The next line up to its LF (the LF dropped, the CR kept), and the position after it.

        Returns (None, len(data)) after keeping the start of a line that the feed cut. A line
        may take `max_line_bytes` bytes with its LF, so the LF is looked for only that far.
        """
        room = self._max_line_bytes - len(self._line)
        lf = data.find(b"\n", pos, pos + room)
        if lf < 0:
            if len(self._line) + len(data) - pos >= self._max_line_bytes:
                # The first max_line_bytes bytes of the line hold no LF: it is over the cap,
                # whatever comes next, so saying so now is the same as saying so later.
                what = "chunk size line" if self._state is SIZE_LINE else "trailer line"
                raise ChunkedError(
                    f"{what} longer than {self._max_line_bytes} bytes (CRLF included)"
                )
            self._line += data[pos:]
            return None, len(data)
        if self._line:
            self._line += data[pos:lf]
            line = bytes(self._line)
            self._line.clear()
        else:
            line = data[pos:lf]
        return line, lf + 1

    def _on_size_line(self, line: bytes) -> None:
        if not line.endswith(b"\r"):
            raise ChunkedError(f"chunk size line ends in a bare LF, not CRLF: {_show(line)}")
        line = line[:-1]
        match = _SIZE_LINE_RE.fullmatch(line)
        if match is None:
            # Covers an empty size, "0x1", "-1", "+1", " 1", and a stray CR or other byte.
            raise ChunkedError(f"invalid chunk size line: {_show(line)}")
        digits = match[1].lstrip(b"0") or b"0"
        # Count the digits first, so a size line of 4,000 hex digits is not turned into an int.
        size = int(digits, 16) if len(digits) <= MAX_CHUNK_SIZE_DIGITS else MAX_CHUNK_SIZE + 1
        if size > MAX_CHUNK_SIZE:
            raise ChunkedError(f"chunk size too large (over 2**63-1): {_show(line)}")
        if size == 0:
            # SIZE_LINE -> TRAILER because a zero size is the last chunk.
            self._state = TRAILER
        else:
            # SIZE_LINE -> DATA because `size` bytes of chunk-data follow.
            self._remaining = size
            self._state = DATA

    def _on_trailer_line(self, line: bytes) -> None:
        if not line.endswith(b"\r"):
            raise ChunkedError(f"trailer line ends in a bare LF, not CRLF: {_show(line)}")
        if line == b"\r":
            # TRAILER -> DONE because the empty line ends the trailer section and the body.
            self._state = DONE
        # Any other line is a trailer field: dropped (RFC 9112 section 7.1.2 lets us).


__all__ = ["DEFAULT_MAX_LINE_BYTES", "ChunkedDecoder"]
