# cython: language_level=3
"""SSELineSplitter, the compiled twin: `data:` payloads out of a text/event-stream.

The rules are in `_sse_py.py`, the reference; this twin follows them with the same errors. How it
stays fast:

- It reads the bytes object's own buffer and finds line ends with memchr. The next LF and the next
  CR are each looked up once and reused until the scan passes them, so a stream with no CR (what
  llama-server sends) costs one memchr over the feed for CR and one per line for LF.
- A line that lies whole inside one feed is parsed in place. Only the start of a line cut by the
  end of a feed is copied, into a carry-over buffer that never grows past the cap.
- A data value becomes a bytes object straight from the input, and an event with one data line
  (nearly all of them) dispatches that very object. Only the second data line of an event starts
  a join buffer. So the Python calls in the loop are the output bytes and the list append.
- The event cap costs one comparison per data line, made before the value is copied.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.string cimport memchr, memcmp, memcpy

from boxmaker.proto.errors import SSEError

# m2a-inference-path.md, "Size caps in the client": 1 MiB per SSE line.
DEFAULT_MAX_LINE_BYTES = 1_048_576
# Per event, so that data lines with no blank line cannot pile up; 4 MiB, the size the client
# allows a body that is not a stream.
DEFAULT_MAX_EVENT_BYTES = 4_194_304

cdef enum:
    LF = 0x0A
    CR = 0x0D
    SPACE = 0x20
    COLON = 0x3A

cdef const unsigned char *BOM = b"\xef\xbb\xbf"


# A growable byte buffer in C memory; len bytes of cap are in use.
cdef struct ByteBuf:
    unsigned char *ptr
    Py_ssize_t len
    Py_ssize_t cap


cdef int buf_append(ByteBuf *buf, const unsigned char *src, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef unsigned char *grown
    if buf.len + n > buf.cap:
        cap = max(buf.len + n, 2 * buf.cap, 256)
        grown = <unsigned char *>PyMem_Realloc(buf.ptr, <size_t>cap)
        if grown == NULL:
            raise MemoryError()
        buf.ptr = grown
        buf.cap = cap
    if n:
        memcpy(buf.ptr + buf.len, src, <size_t>n)
    buf.len += n
    return 0


cdef Py_ssize_t check_cap(str name, object cap) except -1:
    """`cap` if it is an int in 1..sys.maxsize; TypeError or ValueError if not.

    This twin's own copy of `_sse_py.check_cap`, so the tests that run both twins check each.
    """
    if not isinstance(cap, int) or isinstance(cap, bool):
        raise TypeError(f"{name} must be an int, got {type(cap).__name__}")
    if not 1 <= cap <= PY_SSIZE_T_MAX:
        raise ValueError(f"{name} must be between 1 and {PY_SSIZE_T_MAX}, got {cap}")
    return cap


cdef inline Py_ssize_t find_byte(const unsigned char *s, Py_ssize_t i, Py_ssize_t n,
                                 int c) noexcept nogil:
    """The offset of the first `c` in s[i:n], or n if there is none."""
    cdef const void *hit = memchr(s + i, c, <size_t>(n - i))
    if hit == NULL:
        return n
    return <const unsigned char *>hit - s


@cython.final  # no subclasses: the cdef methods are called directly, not through a vtable
cdef class SSELineSplitter:
    """Splits a text/event-stream into the `data` payloads of its events, one feed at a time."""

    cdef Py_ssize_t _max  # the line cap
    cdef Py_ssize_t _max_event  # the event cap
    # Bytes of the BOM seen at the stream start; 3 once the start is past (BOM or not).
    cdef int _bom_seen
    # The last feed ended with a CR: an LF at the start of the next one is part of a CRLF.
    cdef bint _skip_lf
    # The start of a line whose end has not come yet (never more than _max bytes).
    cdef ByteBuf _partial
    # Data lines since the last dispatch. The first value is kept as the bytes object to
    # dispatch; from the second on, the values are joined with LF in _joined (never more than
    # the event cap).
    cdef Py_ssize_t _ndata
    cdef bytes _first
    cdef ByteBuf _joined
    # The SSEError message once a cap was broken; the splitter stays broken.
    cdef str _error

    def __cinit__(self):
        self._partial.ptr = NULL
        self._partial.len = self._partial.cap = 0
        self._joined.ptr = NULL
        self._joined.len = self._joined.cap = 0

    def __dealloc__(self):
        PyMem_Free(self._partial.ptr)
        PyMem_Free(self._joined.ptr)

    def __init__(self, max_line_bytes=DEFAULT_MAX_LINE_BYTES, *,
                 max_event_bytes=DEFAULT_MAX_EVENT_BYTES):
        self._max = check_cap("max_line_bytes", max_line_bytes)
        self._max_event = check_cap("max_event_bytes", max_event_bytes)
        self._bom_seen = 0
        self._skip_lf = False
        self._partial.len = 0
        self._ndata = 0
        self._first = None
        self._joined.len = 0
        self._error = None

    @property
    def max_line_bytes(self):
        """The longest line accepted, in bytes without its line end."""
        return self._max

    @property
    def max_event_bytes(self):
        """The longest event payload accepted, in bytes: data values and the LFs joining them."""
        return self._max_event

    @property
    def pending_bytes(self):
        """Bytes of an unfinished line held for the next feed (never more than the line cap)."""
        return self._partial.len

    @property
    def event_bytes(self):
        """The payload length of the event being built (never more than the event cap)."""
        return self._payload_len()

    def feed(self, data):
        """Takes the next bytes of the stream; returns the payload of every event it completed.

        Raises TypeError if `data` is not bytes, SSEError if a line or an event is longer than its
        cap (now or in an earlier feed).
        """
        if not isinstance(data, bytes):
            raise TypeError(f"feed() wants bytes, got {type(data).__name__}")
        if self._error is not None:
            raise SSEError(self._error)
        cdef list events = []
        self._feed(<const unsigned char *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), events)
        return events

    cdef int _feed(self, const unsigned char *s, Py_ssize_t n, list events) except -1:
        cdef Py_ssize_t i = 0
        cdef Py_ssize_t lf = -1  # the next LF at or after i, n if none; -1: not looked up yet
        cdef Py_ssize_t cr = -1  # the same for CR
        cdef Py_ssize_t eol, length
        if self._bom_seen < 3:
            i = self._skip_bom(s, n)
        if self._skip_lf and i < n:
            self._skip_lf = False
            if s[i] == LF:  # the LF of a CRLF that was cut after the CR
                i += 1
        while i < n:
            if lf < i:
                lf = find_byte(s, i, n, LF)
            if cr < i:
                cr = find_byte(s, i, n, CR)
            eol = lf if lf < cr else cr
            if eol == n:
                break
            length = eol - i
            if self._partial.len == 0:
                if length > self._max:
                    return self._fail_line()
                self._line(s + i, length, events)
            else:
                # Check the length before joining, so an over-long line is never copied.
                if self._partial.len + length > self._max:
                    return self._fail_line()
                buf_append(&self._partial, s + i, length)
                self._line(self._partial.ptr, self._partial.len, events)
                self._partial.len = 0
            i = eol + 1
            if eol == cr:
                if i == n:
                    self._skip_lf = True  # a CR ends the feed: its LF may open the next one
                elif s[i] == LF:
                    i += 1
        # The rest is the start of a line whose end is in a later feed.
        if i < n:
            if self._partial.len + (n - i) > self._max:
                return self._fail_line()
            buf_append(&self._partial, s + i, n - i)
        return 0

    cdef Py_ssize_t _skip_bom(self, const unsigned char *s, Py_ssize_t n) except -1:
        """Consumes the BOM bytes at the start of the stream; returns the offset after them."""
        cdef Py_ssize_t i = 0
        while self._bom_seen < 3 and i < n:
            if s[i] != BOM[self._bom_seen]:
                # Not a BOM after all: the bytes held back are the start of the first line.
                buf_append(&self._partial, BOM, self._bom_seen)
                self._bom_seen = 3
                break
            self._bom_seen += 1
            i += 1
        return i

    cdef int _line(self, const unsigned char *s, Py_ssize_t n, list events) except -1:
        """Processes one complete line (without its line end); appends a dispatched payload."""
        cdef Py_ssize_t start
        if n == 0:
            # A blank line dispatches the event, unless there was no data line at all.
            if self._ndata == 1:
                events.append(self._first)
                self._first = None
            elif self._ndata > 1:
                events.append(PyBytes_FromStringAndSize(<char *>self._joined.ptr,
                                                        self._joined.len))
                self._joined.len = 0
            self._ndata = 0
            return 0
        # Comments (":...") and every field but `data` fail this test and are ignored.
        if n < 4 or memcmp(s, b"data", 4) != 0:
            return 0
        if n == 4:
            start = 4  # `data` with no colon: an empty value
        elif s[4] != COLON:
            return 0  # a longer field name such as `datum`
        elif n > 5 and s[5] == SPACE:
            start = 6  # one optional space after the colon, no more
        else:
            start = 5
        return self._data(s + start, n - start)

    cdef inline Py_ssize_t _payload_len(self) noexcept:
        """The length of the event's payload so far: its data values and the LFs joining them."""
        if self._ndata == 0:
            return 0
        if self._ndata == 1:
            return PyBytes_GET_SIZE(self._first)
        return self._joined.len

    cdef int _data(self, const unsigned char *value, Py_ssize_t n) except -1:
        """Adds one data value to the event being built."""
        # The payload with this value added; checked before anything is copied.
        cdef Py_ssize_t size = n if self._ndata == 0 else self._payload_len() + 1 + n
        if size > self._max_event:
            return self._fail_event()
        if self._ndata == 0:
            self._first = PyBytes_FromStringAndSize(<const char *>value, n)
        else:
            if self._ndata == 1:
                buf_append(&self._joined, <const unsigned char *>PyBytes_AS_STRING(self._first),
                           PyBytes_GET_SIZE(self._first))
                self._first = None
            buf_append(&self._joined, b"\n", 1)
            buf_append(&self._joined, value, n)
        self._ndata += 1
        return 0

    cdef int _fail_line(self) except -1:
        """Raises the line cap error (see _fail)."""
        return self._fail(f"SSE line longer than {self._max} bytes")

    cdef int _fail_event(self) except -1:
        """Raises the event cap error (see _fail)."""
        return self._fail(f"SSE event longer than {self._max_event} bytes")

    cdef int _fail(self, str message) except -1:
        """Breaks the splitter for good and raises SSEError(message); frees what it held."""
        self._error = message
        PyMem_Free(self._partial.ptr)
        PyMem_Free(self._joined.ptr)
        self._partial.ptr = self._joined.ptr = NULL
        self._partial.len = self._partial.cap = self._joined.len = self._joined.cap = 0
        self._first = None
        self._ndata = 0
        raise SSEError(self._error)
