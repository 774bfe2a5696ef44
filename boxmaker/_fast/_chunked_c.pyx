# cython: language_level=3, embedsignature=True
"""ChunkedDecoder: the body out of an HTTP/1.1 chunked transfer coding, compiled.

The same state machine, rules, limits and error messages as `_chunked_py.py` (read that for the
grammar and the choices made). Here lines are found with memchr, the size is parsed through a
table, and chunk data is memcpy'd straight into one output bytes object: exact for a feed that
holds one chunk, else grown once to the size of the feed and shrunk at the end. A feed that is all
chunk data is returned as it is, without a copy. Only error paths call into Python.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_XDECREF
from libc.stdint cimport uint64_t
from libc.string cimport memchr, memcpy

from boxmaker.proto.errors import ChunkedError

# The raw C-API calls that let us fill one bytes object and shrink it in place; with `object`
# types Cython would hold an extra reference and _PyBytes_Resize needs the only one.
cdef extern from "Python.h":
    PyObject* _new_bytes "PyBytes_FromStringAndSize"(const char* s, Py_ssize_t n) except NULL
    char* _bytes_buffer "PyBytes_AS_STRING"(PyObject* o)
    Py_ssize_t _bytes_size "PyBytes_GET_SIZE"(PyObject* o)
    int _PyBytes_Resize(PyObject** o, Py_ssize_t n) except -1

# The same limits as _chunked_py; see the reasons there.
DEFAULT_MAX_LINE_BYTES = 4096
cdef enum:
    MIN_MAX_LINE_BYTES = 3
    MAX_CHUNK_SIZE_DIGITS = 16
    SHOW_BYTES = 40
cdef uint64_t MAX_CHUNK_SIZE = 0x7FFFFFFFFFFFFFFF

cdef enum:
    HTAB = 0x09
    LF = 0x0A
    CR = 0x0D
    SP = 0x20
    SEMICOLON = 0x3B

# The states of _chunked_py._State, as ints.
cdef enum State:
    SIZE_LINE
    DATA
    DATA_CR
    DATA_LF
    TRAILER
    DONE
    FAILED

# Hex digit value by byte, -1 for anything else.
cdef signed char HEX_VALUE[256]


cdef void _init_hex() noexcept:
    cdef int i
    for i in range(256):
        HEX_VALUE[i] = -1
    for i in range(10):
        HEX_VALUE[48 + i] = i
    for i in range(6):
        HEX_VALUE[65 + i] = 10 + i
        HEX_VALUE[97 + i] = 10 + i


_init_hex()


cdef str _show(const char* s, Py_ssize_t n):
    """A short repr of a bad line for an error message (as _chunked_py._show)."""
    if n > SHOW_BYTES:
        return repr(PyBytes_FromStringAndSize(s, SHOW_BYTES)) + "..."
    return repr(PyBytes_FromStringAndSize(s, n))


@cython.final
cdef class ChunkedDecoder:
    """Decodes one chunked body, fed in pieces of any size.

    Args:
        max_line_bytes: the longest chunk-size or trailer line accepted, its CRLF included.

    Raises:
        ValueError: max_line_bytes is less than 3 (too short for the last chunk, "0\\r\\n").
    """

    cdef Py_ssize_t _max_line_bytes
    cdef State _state
    cdef uint64_t _remaining  # chunk-data bytes still to come in the current chunk
    cdef char* _line  # the start of a line that the end of a feed cut; max_line_bytes long
    cdef Py_ssize_t _line_len
    cdef bytes _unused
    cdef str _error

    def __cinit__(self):
        # A usable decoder even if __init__ is skipped (ChunkedDecoder.__new__).
        self._max_line_bytes = DEFAULT_MAX_LINE_BYTES
        self._state = SIZE_LINE
        self._line = NULL
        self._unused = b""
        self._error = ""

    def __dealloc__(self):
        PyMem_Free(self._line)

    def __init__(self, Py_ssize_t max_line_bytes=DEFAULT_MAX_LINE_BYTES):
        if max_line_bytes < MIN_MAX_LINE_BYTES:
            raise ValueError(
                f"max_line_bytes must be at least {MIN_MAX_LINE_BYTES}, got {max_line_bytes}"
            )
        self._max_line_bytes = max_line_bytes
        self._state = SIZE_LINE
        self._remaining = 0
        PyMem_Free(self._line)  # in case __init__ runs twice; allocated when first needed
        self._line = NULL
        self._line_len = 0
        self._unused = b""
        self._error = ""

    @property
    def max_line_bytes(self):
        return self._max_line_bytes

    @property
    def done(self):
        """True once the last chunk, the trailers and the final CRLF have all been read."""
        return self._state == DONE

    @property
    def unused(self):
        """The bytes fed after the end of the body, kept for the caller."""
        return self._unused

    def feed(self, bytes data not None):
        """Decodes the next piece of the encoded body; see _chunked_py.ChunkedDecoder.feed."""
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        cdef PyObject* out = NULL
        cdef Py_ssize_t out_len
        cdef object result
        if self._state == DONE:
            self._unused += data
            return b""
        if self._state == FAILED:
            raise ChunkedError(self._error)
        if n == 0:
            return b""
        if self._state == DATA and <uint64_t>n <= self._remaining:
            # The whole feed is chunk data (a big chunk read in pieces): hand it back as is.
            self._remaining -= <uint64_t>n
            if self._remaining == 0:
                self._state = DATA_CR
            return data
        try:
            out_len = self._decode(PyBytes_AS_STRING(data), n, &out)
        except BaseException:
            Py_XDECREF(out)
            raise
        if out == NULL:
            return b""
        if out_len != _bytes_size(out):
            _PyBytes_Resize(&out, out_len)  # on failure it frees `out` and sets it to NULL
        result = <object>out  # takes a second reference ...
        Py_DECREF(result)  # ... so drop the one _new_bytes gave us
        return result

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef Py_ssize_t _decode(self, const char* p, Py_ssize_t n, PyObject** out) except -1:
        """Runs the state machine over p[0:n]; returns how many body bytes it wrote to *out.

        *out is created at the first chunk data, just big enough for it, and grown once, to hold
        the rest of the feed, if more follows; it stays NULL if there is none. On an error the
        caller frees it.
        """
        cdef Py_ssize_t pos = 0
        cdef Py_ssize_t take
        cdef Py_ssize_t out_len = 0
        cdef Py_ssize_t out_cap = 0
        cdef char* dst = NULL
        cdef char got[2]
        while pos < n:
            if self._state == DATA:
                take = n - pos
                if <uint64_t>take > self._remaining:
                    take = <Py_ssize_t>self._remaining
                if out_len + take > out_cap:
                    if out[0] == NULL:
                        # Just this piece: often (a feed per chunk) the only one.
                        out_cap = take
                        out[0] = _new_bytes(NULL, out_cap)
                    else:
                        # A second piece: make room for the rest of the feed at once.
                        out_cap = out_len + (n - pos)
                        _PyBytes_Resize(out, out_cap)
                    dst = _bytes_buffer(out[0])
                memcpy(dst + out_len, p + pos, take)
                out_len += take
                pos += take
                self._remaining -= <uint64_t>take
                if self._remaining == 0:
                    self._state = DATA_CR  # chunk-data is followed by CRLF
            elif self._state == DATA_CR:
                if p[pos] != CR:
                    self._fail("missing CRLF after chunk data: got "
                               + repr(PyBytes_FromStringAndSize(p + pos, 1)))
                pos += 1
                self._state = DATA_LF
            elif self._state == DATA_LF:
                if p[pos] != LF:
                    got[0] = CR
                    got[1] = p[pos]
                    self._fail("missing CRLF after chunk data: got "
                               + repr(PyBytes_FromStringAndSize(got, 2)))
                pos += 1
                self._state = SIZE_LINE  # the next chunk (maybe the last) starts here
            else:
                pos = self._take_line(p, n, pos)
                if self._state == DONE:
                    self._unused = PyBytes_FromStringAndSize(p + pos, n - pos)
                    break
        return out_len

    cdef Py_ssize_t _take_line(self, const char* p, Py_ssize_t n, Py_ssize_t pos) except -1:
        """Handles the line starting at p[pos] if its LF is in this feed, else keeps its start.

        Returns the position after the LF, or n. A line may take max_line_bytes bytes with its
        LF, so the LF is looked for only that far (see _chunked_py._take_line).
        """
        cdef Py_ssize_t avail = n - pos
        cdef Py_ssize_t scan = self._max_line_bytes - self._line_len
        cdef const char* lf
        cdef Py_ssize_t k
        if scan > avail:
            scan = avail
        lf = <const char*>memchr(p + pos, LF, <size_t>scan)
        if lf == NULL:
            if self._line_len + avail >= self._max_line_bytes:
                self._fail(
                    ("chunk size line" if self._state == SIZE_LINE else "trailer line")
                    + f" longer than {self._max_line_bytes} bytes (CRLF included)"
                )
            if self._line == NULL:
                self._line = <char*>PyMem_Malloc(<size_t>self._max_line_bytes)
                if self._line == NULL:
                    raise MemoryError()
            # Fits: _line_len + avail < max_line_bytes.
            memcpy(self._line + self._line_len, p + pos, <size_t>avail)
            self._line_len += avail
            return n
        k = lf - (p + pos)
        if self._line_len == 0:
            self._on_line(p + pos, k)
        else:
            # Fits: the LF was found within max_line_bytes - _line_len bytes.
            memcpy(self._line + self._line_len, p + pos, <size_t>k)
            k += self._line_len
            self._line_len = 0
            self._on_line(self._line, k)
        return pos + (lf - (p + pos)) + 1

    cdef int _on_line(self, const char* s, Py_ssize_t n) except -1:
        """One whole line, s[0:n], its LF dropped and its CR (if any) kept."""
        cdef Py_ssize_t i = 0
        cdef Py_ssize_t j
        cdef int digits = 0
        cdef signed char d
        cdef uint64_t size = 0
        if self._state == TRAILER:
            if n == 0 or s[n - 1] != CR:
                self._fail("trailer line ends in a bare LF, not CRLF: " + _show(s, n))
            if n == 1:
                self._state = DONE  # the empty line ends the trailer section and the body
            return 0  # any other line is a trailer field: dropped
        if n == 0 or s[n - 1] != CR:
            self._fail("chunk size line ends in a bare LF, not CRLF: " + _show(s, n))
        n -= 1
        # chunk-size: hex digits; leading zeros are not counted against the 16 allowed.
        while i < n:
            d = HEX_VALUE[<unsigned char>s[i]]
            if d < 0:
                break
            if digits or d:
                digits += 1
                if digits <= MAX_CHUNK_SIZE_DIGITS:
                    size = size * 16 + <uint64_t>d
            i += 1
        if i == 0:
            self._fail("invalid chunk size line: " + _show(s, n))
        # BWS, then the end or ";" and extensions without a CR (ignored).
        j = i
        while j < n and (s[j] == SP or s[j] == HTAB):
            j += 1
        if j < n and (s[j] != SEMICOLON or memchr(s + j, CR, <size_t>(n - j)) != NULL):
            self._fail("invalid chunk size line: " + _show(s, n))
        if digits > MAX_CHUNK_SIZE_DIGITS or size > MAX_CHUNK_SIZE:
            self._fail("chunk size too large (over 2**63-1): " + _show(s, n))
        if size == 0:
            self._state = TRAILER  # a zero size is the last chunk
        else:
            self._remaining = size
            self._state = DATA
        return 0

    cdef int _fail(self, str message) except -1:
        # any -> FAILED because the stream is broken; we cannot find the next chunk.
        self._state = FAILED
        self._error = message
        self._line_len = 0
        raise ChunkedError(message)
