"""One ProtocolError family for every core that parses bytes from outside (h11's shape).

The compiled twins in boxmaker._fast import these, so both twins raise the same types with the
same messages and a differential test can compare `(type(exc), str(exc))`.
"""


class ProtocolError(Exception):
    """Bytes from a peer broke the protocol; the message says what was wrong."""


class SSEError(ProtocolError):
    """An event stream broke a limit (an over-long line)."""


class ChunkedError(ProtocolError):
    """A chunked HTTP/1.1 body is malformed or broke a limit."""


class FrameError(ProtocolError):
    """A channel frame is malformed or broke a limit."""


class RecordError(ProtocolError):
    """A session log line does not decode to a LogRecord."""
