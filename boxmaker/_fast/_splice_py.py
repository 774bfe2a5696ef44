"""pump(src_fd, dst_fd): copy bytes from one descriptor to another until EOF, in plain Python.

The reference for `_splice_c.pyx`; both twins keep this contract:

- Read from src_fd and write everything read to dst_fd, in order, until a read returns b"" (EOF).
  Return the number of bytes written.
- Shut down and close nothing: the caller passes the half-close on (shutdown(SHUT_WR) on the other
  socket) and owns both descriptors.
- Both fds are blocking. A short write is not an error: the rest is written next.
- Errors are OSError with the errno of the failed call (EBADF, EPIPE, ECONNRESET, ...). Both fds
  are checked with fstat before the first read, so a bad dst_fd fails before any byte is taken.
- EINTR is retried after the signal handlers ran; os.read and os.write do that themselves (PEP 475),
  and an exception raised by a handler ends the pump.
"""

import os

METHOD = "read/write"

# One read's worth: several socket buffers' worth, so bulk copies make few calls.
BUFFER_BYTES = 256 * 1024


def pump(src_fd: int, dst_fd: int) -> int:
    """Copies bytes from src_fd to dst_fd until EOF on src_fd.

    Args:
        src_fd: the descriptor to read from (socket, pipe or file).
        dst_fd: the descriptor to write to.

    Returns:
        The number of bytes written to dst_fd.

    Raises:
        OSError: with the errno of the failed call.
    """
    os.fstat(src_fd)
    os.fstat(dst_fd)
    moved = 0
    while True:
        data = os.read(src_fd, BUFFER_BYTES)
        if not data:
            return moved
        view = memoryview(data)
        while view:
            written = os.write(dst_fd, view)
            view = view[written:]
            moved += written
