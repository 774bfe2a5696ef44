"""The `data:` payloads of a chat-completions event stream. [core]

`_fast.sse.SSELineSplitter` does the line work (lines split across reads, CRLF, comment lines,
the line cap); this layer adds what the stream means to loopd: `data: [DONE]` ends it, and
anything after that is ignored. The cap (1 MiB per line by default, `max_sse_line_bytes`) is
enforced in the splitter as soon as a line passes it, and caps an event's payload too (a
llama-server event is one `data:` line), so data lines that never end their event are stopped at
the same size; that and every other SSEError becomes a `BadResponse`.

A payload is returned only once its event is complete (the blank line after it): a comment, an
event without data or part of a line returns nothing, which is what liveness relies on.
"""

from typing import Final

from boxmaker._fast.sse import SSELineSplitter
from boxmaker.loopd.llama.errors import BadResponse
from boxmaker.proto import ProtocolError

DONE: Final = b"[DONE]"


class EventStream:
    """Payloads out of a decoded response body, fed in pieces of any size."""

    def __init__(self, max_line_bytes: int) -> None:
        self._splitter = SSELineSplitter(max_line_bytes, max_event_bytes=max_line_bytes)
        self.done = False  # `data: [DONE]` has been seen

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads completed by `data`, in order, up to (not including) `[DONE]`.

        Raises:
            BadResponse: a line over the cap.
        """
        if self.done or not data:
            return []
        try:
            payloads = self._splitter.feed(data)
        except ProtocolError as exc:
            raise BadResponse(f"event stream: {exc}") from None
        if DONE in payloads:
            self.done = True
            return payloads[: payloads.index(DONE)]
        return payloads
