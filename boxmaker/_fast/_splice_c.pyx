# cython: language_level=3
"""pump(src_fd, dst_fd): the compiled twin of `_splice_py`, moving bytes with splice(2) (Linux).

The same contract as the Python twin (see `_splice_py.py`); only the mechanism differs. It is chosen
per call from the two fds, and METHOD = "splice+read/write" says that both are in use:

- AF_UNIX stream socket to TCP socket (inferproxy's client -> upstream): a read/write loop through
  a 256 KiB heap buffer, from the start. Here splice loses: the pages spliced out of a Unix socket
  cost TCP more to send than two plain copies do. Every other pair measured splices faster: TCP ->
  Unix (the way back), Unix -> Unix, TCP -> TCP. (The figures: docs/fast-paths.md.)
- Any other socket to socket (and files): splice(2) needs a pipe on one side, so the bytes go
  src -> our pipe -> dst and never enter user space. The pipe is made per call (pipe2, O_CLOEXEC),
  grown to PIPE_BYTES with F_SETPIPE_SZ when the kernel allows it (it refuses once the user's
  pipe-user-pages-soft budget is spent; the default 64 KiB pipe still works, only slower), and
  always closed before returning.
- src or dst already a pipe: one splice straight from src to dst, no pipe of our own.
- Where the kernel will not splice (EINVAL or ENOSYS on the first splice into or out of the pipe,
  e.g. src is /proc/self/environ or dst is a file opened O_APPEND): a read/write loop through a
  heap buffer. Bytes already spliced into our pipe are drained through that buffer first, in order.

Waiting for input on an AF_UNIX source is done in poll(2), not in a blocking read or splice. A Unix
socket has one wait queue for both directions, and every time its peer reads something this socket
sent, the kernel wakes everything asleep on it (unix_write_space), readers too. In inferproxy the
thread pumping client -> upstream sleeps on the client socket while the other thread writes the
answers to it, so each answer the client read woke that thread for nothing: a context switch, on a
2-core machine often right in front of the client, on every round trip. poll() sleeps on POLLIN
alone and is not woken by that, which cut the added latency at p99 by a quarter (the figures:
docs/fast-paths.md). The cost is a recv(MSG_DONTWAIT) that finds nothing, once per burst; a busy source never gets to poll. SO_RCVTIMEO still applies: it becomes
the poll timeout, and its expiry the same EAGAIN a blocking read reports. TCP wakes its sleepers
on new send space only after a sender ran out of it, so a TCP source blocks in the call as before.

The whole copy loop runs without the GIL. It leaves the loop only at EOF, on an error, or on EINTR,
where it runs the signal handlers with the GIL (PyErr_CheckSignals, as PEP 475 asks of the stdlib)
and goes back in with its state (bytes still in the pipe or the buffer) intact.

Flags: SPLICE_F_MOVE on every call (a hint; free). Never SPLICE_F_MORE: on the pipe -> socket side
it sets MSG_MORE, which corks a small TCP write until more data comes or a timer fires, so a lone
100-byte write could sit in the kernel; on the socket -> pipe side it does nothing. The kernel sets
MSG_MORE by itself between segments of one splice when more of the pipe is still to go.
"""

from cpython.exc cimport PyErr_CheckSignals

from ._syscalls cimport (
    EAGAIN,
    EINTR,
    EWOULDBLOCK,
    EINVAL,
    ENOMEM,
    ENOSYS,
    F_GETPIPE_SZ,
    F_SETPIPE_SZ,
    O_CLOEXEC,
    S_ISFIFO,
    S_ISSOCK,
    SPLICE_F_MOVE,
    SPLICE_F_NONBLOCK,
    MSG_DONTWAIT,
    POLLIN,
    SO_RCVTIMEO,
    AF_INET,
    AF_INET6,
    AF_UNIX,
    IPPROTO_TCP,
    SO_DOMAIN,
    SO_PROTOCOL,
    SO_TYPE,
    SOCK_STREAM,
    SOL_SOCKET,
    close,
    errno,
    fcntl,
    free,
    fstat,
    getsockopt,
    malloc,
    socklen_t,
    pipe2,
    poll,
    pollfd,
    read,
    recv,
    splice,
    stat,
    timeval,
    write,
)

import os

# Both mechanisms are in use (see above); inferproxy prints this in its start line.
METHOD = "splice+read/write"

cdef enum:
    # 1 MiB pipe: one splice can move a whole socket receive buffer. It is the default
    # /proc/sys/fs/pipe-max-size, so an unprivileged process may ask for it.
    PIPE_BYTES = 1 << 20
    # What a pipe holds when F_SETPIPE_SZ and F_GETPIPE_SZ both fail (pipe(7)).
    DEFAULT_PIPE_BYTES = 65536
    # Count for one direct splice when src or dst is a pipe; the kernel caps it at that pipe's size.
    DIRECT_CHUNK_BYTES = 1 << 20
    # The read/write buffer, allocated only when that loop runs. Measured best for Unix -> TCP:
    # one read takes what a Unix sender has in flight (its SO_SNDBUF, 208 KiB by default), and a
    # bigger buffer only falls out of the cache.
    BUFFER_BYTES = 256 * 1024

cdef enum Mode:
    VIA_PIPE     # src -> our pipe -> dst
    DIRECT       # src -> dst, one of them is a pipe
    READ_WRITE   # Unix -> TCP, or the kernel refused to splice: read() into buf, write() out

cdef enum Status:
    MOVED = 1         # (internal to _run) some bytes moved, keep going
    DONE = 0          # src reached EOF and everything read has been written
    FAILED = -1       # Copy.err holds the errno
    INTERRUPTED = -2  # EINTR: run the signal handlers, then go back in

cdef struct Copy:
    int src
    int dst
    int pipe_r
    int pipe_w
    Mode mode
    size_t chunk          # bytes to ask for per splice into the pipe
    size_t in_pipe        # spliced into our pipe, not yet out of it
    bint in_ok            # a splice from src worked once: EINVAL after that is a real error
    bint out_ok           # the same for splices to dst
    char *buf
    size_t buf_start      # buf[buf_start:buf_end] was read and is not yet written
    size_t buf_end
    unsigned long long moved  # bytes written to dst
    int err
    bint poll_src         # src is an AF_UNIX socket: wait for input in poll() (see above)
    int poll_ms           # the poll timeout: src's SO_RCVTIMEO, -1 for none
    unsigned int in_flags # flags for the splice into the pipe


cdef inline Status _failed(Copy *c, int err) noexcept nogil:
    c.err = err
    return INTERRUPTED if err == EINTR else FAILED


cdef inline bint _refused(int err) noexcept nogil:
    # What splice(2) says when one of the two files has no splice support.
    return err == EINVAL or err == ENOSYS


cdef inline bint _would_block(int err) noexcept nogil:
    return err == EAGAIN or err == EWOULDBLOCK


cdef int _wait_for_input(Copy *c) noexcept nogil:
    """Sleeps until src has input, EOF or an error; 0, or the errno to fail with."""
    cdef pollfd pfd
    cdef int ready
    pfd.fd = c.src
    pfd.events = POLLIN
    pfd.revents = 0
    ready = poll(&pfd, 1, c.poll_ms)
    if ready < 0:
        return errno
    if ready == 0:
        return EAGAIN  # SO_RCVTIMEO expired: what a blocking read says then
    return 0


cdef Status _read_write_step(Copy *c) noexcept nogil:
    cdef ssize_t n
    cdef size_t want
    cdef int err
    if c.buf_start == c.buf_end:
        if c.buf == NULL:
            c.buf = <char *>malloc(BUFFER_BYTES)
            if c.buf == NULL:
                return _failed(c, ENOMEM)
        if c.in_pipe:
            # Bytes the dst refused to take by splice are still in our pipe: they go first.
            want = c.in_pipe if c.in_pipe < BUFFER_BYTES else BUFFER_BYTES
            n = read(c.pipe_r, c.buf, want)
        else:
            while True:
                if c.poll_src:
                    n = recv(c.src, c.buf, BUFFER_BYTES, MSG_DONTWAIT)
                else:
                    n = read(c.src, c.buf, BUFFER_BYTES)
                if n >= 0 or not (c.poll_src and _would_block(errno)):
                    break
                err = _wait_for_input(c)
                if err:
                    return _failed(c, err)
        if n < 0:
            return _failed(c, errno)
        if n == 0:
            return DONE
        if c.in_pipe:
            c.in_pipe -= <size_t>n
        c.buf_start = 0
        c.buf_end = <size_t>n
    n = write(c.dst, c.buf + c.buf_start, c.buf_end - c.buf_start)
    if n < 0:
        return _failed(c, errno)
    c.buf_start += <size_t>n
    c.moved += <unsigned long long>n
    return MOVED


cdef Status _run(Copy *c) noexcept nogil:
    """Copies until EOF or an error; returns DONE, FAILED or INTERRUPTED (EINTR)."""
    cdef ssize_t n
    cdef int err
    cdef Status status
    while True:
        if c.mode == READ_WRITE:
            status = _read_write_step(c)
            if status != MOVED:
                return status
        elif c.mode == DIRECT:
            n = splice(c.src, NULL, c.dst, NULL, DIRECT_CHUNK_BYTES, SPLICE_F_MOVE)
            if n < 0:
                err = errno
                if _refused(err) and not c.in_ok:
                    c.mode = READ_WRITE
                    continue
                return _failed(c, err)
            if n == 0:
                return DONE
            c.in_ok = True
            c.moved += <unsigned long long>n
        else:
            if c.in_pipe == 0:
                while True:
                    # SPLICE_F_NONBLOCK (with poll_src) cannot stop at our pipe: it is empty here.
                    n = splice(c.src, NULL, c.pipe_w, NULL, c.chunk, c.in_flags)
                    if n >= 0 or not (c.poll_src and _would_block(errno)):
                        break
                    err = _wait_for_input(c)
                    if err:
                        return _failed(c, err)
                if n < 0:
                    err = errno
                    if _refused(err) and not c.in_ok:
                        c.mode = READ_WRITE
                        continue
                    return _failed(c, err)
                if n == 0:
                    return DONE
                c.in_ok = True
                c.in_pipe = <size_t>n
            # Partial splices are normal (a full socket buffer): loop until the pipe is empty.
            n = splice(c.pipe_r, NULL, c.dst, NULL, c.in_pipe, SPLICE_F_MOVE)
            if n < 0:
                err = errno
                if _refused(err) and not c.out_ok:
                    c.mode = READ_WRITE  # drains c.in_pipe first
                    continue
                # Bytes left in the pipe are lost with it: the connection is broken anyway.
                return _failed(c, err)
            c.out_ok = True
            c.in_pipe -= <size_t>n
            c.moved += <unsigned long long>n


cdef int _make_pipe(Copy *c) except -1:
    cdef int fds[2]
    cdef int size
    if pipe2(fds, O_CLOEXEC) != 0:
        _raise(errno)
    c.pipe_r = fds[0]
    c.pipe_w = fds[1]
    size = fcntl(c.pipe_w, F_SETPIPE_SZ, <int>PIPE_BYTES)
    if size < 0:
        # EPERM once the user's pipe budget is spent: keep the pipe at whatever size it has.
        size = fcntl(c.pipe_w, F_GETPIPE_SZ)
    c.chunk = <size_t>size if size > 0 else DEFAULT_PIPE_BYTES
    return 0


cdef int _socket_option(int fd, int option) noexcept nogil:
    """The SOL_SOCKET option's int value, or -1 if it cannot be had."""
    cdef int value = -1
    cdef socklen_t size = sizeof(value)
    if getsockopt(fd, SOL_SOCKET, option, &value, &size) != 0:
        return -1
    return value


cdef int _receive_timeout_ms(int fd) noexcept nogil:
    """fd's SO_RCVTIMEO in milliseconds (rounded up), -1 for none or if it cannot be had."""
    cdef timeval tv
    cdef socklen_t size = sizeof(tv)
    cdef long long ms
    if getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &size) != 0:
        return -1
    ms = <long long>tv.tv_sec * 1000 + (tv.tv_usec + 999) // 1000
    if ms <= 0:
        return -1
    return <int>ms if ms < 0x7FFFFFFF else 0x7FFFFFFF


cdef bint _unix_to_tcp(
    int src, unsigned int src_mode, int dst, unsigned int dst_mode
) noexcept nogil:
    """True for an AF_UNIX stream socket src and a TCP socket dst: read/write beats splice there."""
    cdef int domain
    if not (S_ISSOCK(src_mode) and S_ISSOCK(dst_mode)):
        return False
    if _socket_option(src, SO_DOMAIN) != AF_UNIX or _socket_option(src, SO_TYPE) != SOCK_STREAM:
        return False
    # A getsockopt failure answers -1, so the pair keeps the default (splice), which then reports
    # whatever is wrong with the fd.
    domain = _socket_option(dst, SO_DOMAIN)
    if domain != AF_INET and domain != AF_INET6:
        return False
    return _socket_option(dst, SO_PROTOCOL) == IPPROTO_TCP


cdef int _raise(int err) except -1:
    # OSError(errno, msg) returns the matching subclass (BrokenPipeError, ...), as os.read does.
    raise OSError(err, os.strerror(err))


def pump(int src_fd, int dst_fd) -> int:
    """Copies bytes from src_fd to dst_fd until EOF on src_fd.

    Closes and shuts down nothing; both fds must be blocking. The GIL is released while copying.

    Args:
        src_fd: the descriptor to read from (socket, pipe or file).
        dst_fd: the descriptor to write to.

    Returns:
        The number of bytes written to dst_fd.

    Raises:
        OSError: with the errno of the failed call (EBADF, EPIPE, ECONNRESET, ...). EINTR is
            retried after the signal handlers ran; an exception raised by a handler ends the pump.
    """
    cdef Copy c
    cdef stat st
    cdef unsigned int src_mode
    cdef unsigned int dst_mode
    cdef Status status
    c.src = src_fd
    c.dst = dst_fd
    c.pipe_r = -1
    c.pipe_w = -1
    c.mode = VIA_PIPE
    c.chunk = DIRECT_CHUNK_BYTES
    c.in_pipe = 0
    c.in_ok = False
    c.out_ok = False
    c.buf = NULL
    c.buf_start = 0
    c.buf_end = 0
    c.moved = 0
    c.err = 0
    c.poll_src = False
    c.poll_ms = -1
    c.in_flags = SPLICE_F_MOVE
    # Both fds are checked before any byte is taken from src, so a bad dst loses nothing.
    if fstat(src_fd, &st) != 0:
        _raise(errno)
    src_mode = st.st_mode
    if fstat(dst_fd, &st) != 0:
        _raise(errno)
    dst_mode = st.st_mode
    if S_ISSOCK(src_mode) and _socket_option(src_fd, SO_DOMAIN) == AF_UNIX:
        c.poll_src = True
        c.poll_ms = _receive_timeout_ms(src_fd)
        c.in_flags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK
    try:
        if S_ISFIFO(src_mode) or S_ISFIFO(dst_mode):
            c.mode = DIRECT
        elif _unix_to_tcp(src_fd, src_mode, dst_fd, dst_mode):
            c.mode = READ_WRITE  # no pipe: the buffer is all it needs
        else:
            _make_pipe(&c)
        while True:
            with nogil:
                status = _run(&c)
            if status == DONE:
                return c.moved
            if status == FAILED:
                _raise(c.err)
            # EINTR (PEP 475): run the handlers; if one raises, the exception ends the pump.
            c.err = 0
            PyErr_CheckSignals()
    finally:
        if c.pipe_r >= 0:
            close(c.pipe_r)
        if c.pipe_w >= 0:
            close(c.pipe_w)
        free(c.buf)
