"""Frames over a pipe's file descriptors: one writer lock, one reader loop.

Both ends of a worker's pipes use these. A write is whole frames under a lock, so frames from
several threads never interleave. The reader hands each frame to a callback from its own thread;
EOF, or a stream that breaks the frame format, ends it (the other end is gone or broken: either
way nothing more can be trusted from it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from boxmaker.proto.errors import FrameError
from boxmaker.proto.frame import CLOSED, NEED_DATA, Frame, FrameDecoder

from .wire import PIPE_KINDS

READ_BYTES = 65_536


class PipeClosed(Exception):
    """The other end of the pipe is gone: a write cannot reach it."""


class FrameWriter:
    """Whole frames onto one fd, from any thread."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()
        self.closed = False

    def send(self, data: bytes) -> None:
        """Writes every byte of `data`.

        Raises:
            PipeClosed: the reader has gone (EPIPE), or `close` was called.
        """
        with self._lock:
            if self.closed:
                raise PipeClosed("the pipe is closed")
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError as exc:  # EPIPE, EBADF: the other end is gone
                raise PipeClosed(f"the pipe's reader is gone: {exc}") from None

    def close(self) -> None:
        """Closes the fd (the reader sees EOF); later sends raise PipeClosed."""
        with self._lock:
            if not self.closed:
                self.closed = True
                os.close(self.fd)


class FrameReader:
    """Frames from one fd, in order; `next()` blocks for the next one."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._decoder = FrameDecoder(PIPE_KINDS)

    def next(self) -> Frame | None:
        """The next frame, or None at a clean EOF.

        Raises:
            PipeBroken: a read failed, or the stream broke the frame format.
        """
        while True:
            try:
                frame = self._decoder.next_frame()
            except FrameError as exc:
                raise PipeBroken(f"a broken frame: {exc}") from None
            if frame is CLOSED:
                return None
            if frame is not NEED_DATA:
                return frame
            try:
                self._decoder.receive_data(os.read(self.fd, READ_BYTES))
            except OSError as exc:
                raise PipeBroken(f"read failed: {exc}") from None


class PipeBroken(Exception):
    """What came through the pipe cannot be read as frames (or the read failed)."""


def read_frames(reader: FrameReader | int, on_frame: Callable[[Frame], None]) -> str | None:
    """Reads frames (from a reader, or a fd) until EOF, calling `on_frame` for each, in order.

    Returns None at a clean EOF, else what went wrong (a broken frame, a read error).
    """
    reader = FrameReader(reader) if isinstance(reader, int) else reader
    try:
        while (frame := reader.next()) is not None:
            on_frame(frame)
    except PipeBroken as exc:
        return str(exc)
    return None
