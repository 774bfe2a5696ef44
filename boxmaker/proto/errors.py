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


class BadRequest(ProtocolError):
    """A request is well framed but its content is refused (a bad session id, say)."""


class BodyError(ProtocolError):
    """A JSON value (a frame body, a tool call, a message) does not have its type's shape."""


class EncodeError(ValueError):
    """A value cannot be encoded: it breaks its own format or a limit.

    Deliberately not a ProtocolError: the caller built the value, so it is never the peer's fault,
    and an edge that answers ProtocolError with `bad_request` must not blame the peer for it (h11
    keeps the same line between LocalProtocolError and RemoteProtocolError).
    """
