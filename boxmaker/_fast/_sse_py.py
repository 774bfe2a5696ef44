"""SSELineSplitter, the pure-Python twin: `data:` payloads out of a text/event-stream.

This is the readable reference; `_sse_c.pyx` does the same with memchr, and the differential tests
in tests/fast/test_diff_sse.py hold the two to the same output and the same errors.

The rules are the parts of the WHATWG event-stream parser that a chat-completion client needs
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

- A line ends at LF, CRLF or a lone CR. A CR ends its line at once; if the next byte, possibly in
  the next feed, is an LF, that LF belongs to the same line end and is skipped. The splitter never
  waits for more input to decide where a line ends.
- One UTF-8 byte order mark (EF BB BF) at the very start of the stream is skipped, even when it
  arrives split across feeds. Anywhere else those bytes are ordinary line content.
- A line that starts with ":" is a comment. Otherwise the field name runs up to the first ":" and
  the value follows it, minus one leading space; a line with no ":" is a field name with an empty
  value. Only the `data` field matters here: event, id, retry and unknown fields are ignored.
- Each `data` value is appended to the event's data buffer followed by an LF. A blank line
  dispatches the event: its payload is the buffer without the final LF. A buffer that is still
  empty (no data line since the last dispatch) dispatches nothing, so `data:` alone gives b"".
- `data: [DONE]` is the payload b"[DONE]"; what it means is the caller's business.
- An event with no blank line after it yet is kept for the next feed; there is no close method, so
  one left incomplete at the end of the stream is never returned.

Two limits, in the core (STYLE.md R2), so that no peer can make the splitter buffer without bound:

- A line longer than `max_line_bytes`, not counting its line end, raises SSEError as soon as the
  bytes held for it pass the cap, so a peer that never sends a line end is stopped.
- An event whose payload (its data values joined with LF) would grow past `max_event_bytes` raises
  SSEError when the data line that would take it over is complete, so a peer that sends data
  lines and never a blank line is stopped too. Only data values and the LFs that join them count.
  The line cap is checked first: a line over both caps raises the line error.

A line or an event of exactly its cap is accepted. After either error the splitter is broken:
every later feed raises the same error.
"""

import re
import sys
from typing import Final, NoReturn

from boxmaker.proto.errors import SSEError

# m2a-inference-path.md, "Size caps in the client": 1 MiB per SSE line.
DEFAULT_MAX_LINE_BYTES: Final = 1_048_576
# Per event, so that data lines with no blank line cannot pile up; 4 MiB, the size the client
# allows a body that is not a stream.
DEFAULT_MAX_EVENT_BYTES: Final = 4_194_304

BOM: Final = b"\xef\xbb\xbf"

# CRLF first, so that a CR and an LF in the same feed are one line end.
_LINE_END = re.compile(rb"\r\n|\r|\n")


def check_cap(name: str, cap: object) -> int:
    """Returns `cap` if it is an int in 1..sys.maxsize; raises TypeError or ValueError if not.

    `name` is the parameter's name, for the message.
    """
    if not isinstance(cap, int) or isinstance(cap, bool):
        raise TypeError(f"{name} must be an int, got {type(cap).__name__}")
    if not 1 <= cap <= sys.maxsize:
        raise ValueError(f"{name} must be between 1 and {sys.maxsize}, got {cap}")
    return cap


class SSELineSplitter:
    """Splits a text/event-stream into the `data` payloads of its events, one feed at a time."""

    __slots__ = (
        "_at_start", "_bom_seen", "_data", "_error", "_max", "_max_event", "_partial", "_skip_lf"
    )  # fmt: skip

    def __init__(
        self,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        *,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        """Args:
        max_line_bytes: the longest line accepted, in bytes without its line end.
        max_event_bytes: the longest event payload accepted: its data values and the LFs
            that join them.

        Raises:
            TypeError, ValueError: a cap is not an int in 1..sys.maxsize.
        """
        self._max = check_cap("max_line_bytes", max_line_bytes)
        self._max_event = check_cap("max_event_bytes", max_event_bytes)
        # The start of the stream: BOM bytes may still come. _bom_seen of them have come so far.
        self._at_start = True
        self._bom_seen = 0
        # The last feed ended with a CR: an LF at the start of the next one is part of a CRLF.
        self._skip_lf = False
        # The start of a line whose end has not come yet (never more than the line cap).
        self._partial = bytearray()
        # The event's data buffer: value + LF for each data line since the last dispatch
        # (never more than the event cap + 1).
        self._data = bytearray()
        # The SSEError message once a cap was broken; the splitter stays broken.
        self._error: str | None = None

    @property
    def max_line_bytes(self) -> int:
        """The longest line accepted, in bytes without its line end."""
        return self._max

    @property
    def max_event_bytes(self) -> int:
        """The longest event payload accepted, in bytes: data values and the LFs joining them."""
        return self._max_event

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished line held for the next feed (never more than the line cap)."""
        return len(self._partial)

    @property
    def event_bytes(self) -> int:
        """The payload length of the event being built (never more than the event cap)."""
        return len(self._data) - 1 if self._data else 0

    def feed(self, data: bytes) -> list[bytes]:
        """Takes the next bytes of the stream.

        Args:
            data: any number of bytes, cut anywhere (b"" is allowed and does nothing).

        Returns:
            The payload of every event this feed completed, in stream order.

        Raises:
            TypeError: `data` is not bytes.
            SSEError: a line or an event is longer than its cap (now, or in an earlier feed).
        """
        if not isinstance(data, bytes):
            raise TypeError(f"feed() wants bytes, got {type(data).__name__}")
        if self._error is not None:
            raise SSEError(self._error)
        if self._at_start:
            data = self._skip_bom(data)
        events: list[bytes] = []
        pos = 0
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == 0x0A:  # the LF of a CRLF that was cut after the CR
                pos = 1
        while (end := _LINE_END.search(data, pos)) is not None:
            # Check the length before joining, so an over-long line is never copied.
            if len(self._partial) + end.start() - pos > self._max:
                self._fail_line()
            line = data[pos : end.start()]
            if self._partial:
                line = bytes(self._partial) + line
                self._partial.clear()
            self._line(line, events)
            pos = end.end()
            if end.group() == b"\r" and pos == len(data):
                self._skip_lf = True  # a CR ends the feed: its LF may open the next one
        # The rest is the start of a line whose end is in a later feed.
        if len(self._partial) + len(data) - pos > self._max:
            self._fail_line()
        self._partial += data[pos:]
        return events

    def _skip_bom(self, data: bytes) -> bytes:
        """Removes the BOM bytes at the start of the stream; returns what follows them."""
        want = BOM[self._bom_seen :]
        head = data[: len(want)]
        if want.startswith(head):
            # All of `data` so far is the BOM (or a start of it: wait for the rest).
            self._bom_seen += len(head)
            self._at_start = self._bom_seen < len(BOM)
            return data[len(head) :]
        # Not a BOM after all: the bytes held back are the start of the first line.
        self._partial += BOM[: self._bom_seen]
        self._at_start = False
        return data

    def _line(self, line: bytes, events: list[bytes]) -> None:
        """Processes one complete line (without its line end); appends a dispatched payload."""
        if not line:
            # A blank line dispatches the event, unless there was no data line at all.
            if self._data:
                del self._data[-1]  # the LF after the last value
                events.append(bytes(self._data))
                self._data.clear()
            return
        if line[0] == 0x3A:  # ":" opens a comment
            return
        field, _, value = line.partition(b":")
        if field != b"data":
            return  # event, id, retry and unknown fields: nothing a payload needs
        if value[:1] == b" ":
            value = value[1:]  # one optional space after the colon, no more
        # _data ends with the LF that will join this value, so this is the new payload length.
        if len(self._data) + len(value) > self._max_event:
            self._fail_event()
        self._data += value
        self._data += b"\n"

    def _fail_line(self) -> NoReturn:
        """Raises the line cap error (see _fail)."""
        self._fail(f"SSE line longer than {self._max} bytes")

    def _fail_event(self) -> NoReturn:
        """Raises the event cap error (see _fail)."""
        self._fail(f"SSE event longer than {self._max_event} bytes")

    def _fail(self, message: str) -> NoReturn:
        """Breaks the splitter for good and raises SSEError(message); frees what it held."""
        self._error = message
        self._partial = bytearray()
        self._data = bytearray()
        raise SSEError(self._error)
