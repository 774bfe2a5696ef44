"""Frames over a pipe's file descriptors: one writer lock, one reader loop.

Both ends of a worker's pipes use these. A write is whole frames under a lock, so frames from
several threads never interleave. The reader hands each frame to a callback from its own thread;
EOF, or a stream that breaks the frame format, ends it (the other end is gone or broken: either
way nothing more can be trusted from it).

The main process reads a worker's stdout with a RelayReader: the frames it relays to a client
(`turn_event`, `turn_done`, `error`) come out as the bytes read, told apart by the prefix
encode_frame writes, and are not parsed; every other frame (the gate's, `no_session`) is decoded
and checked in full, as it is acted on. Why the bodies are trusted: docs/decisions/worker-relay.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from boxmaker.proto.errors import FrameError
from boxmaker.proto.frame import (
    CLOSED,
    LENGTH_BYTES,
    MAX_FRAME_BYTES,
    NEED_DATA,
    Frame,
    FrameDecoder,
)

from .wire import PIPE_KINDS, RELAYED_KINDS

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


class BatchWriter:
    """Whole frames onto one fd, from any thread, by a writer thread of its own: what the senders
    queued while the last write ran goes out in one write (one syscall for many events under a
    fast stream). A sender waits while more than `max_pending` bytes are queued, so a reader that
    stops reading holds the senders up, as a blocking write would.
    """

    def __init__(self, fd: int, max_pending: int = 1 << 20) -> None:
        self.fd = fd
        self._max = max_pending
        self._cond = threading.Condition()
        self._pending: list[bytes] = []
        self._size = 0
        self._writing = False
        self._broken: str | None = None  # why writes stopped (the reader went away)
        self.closed = False
        self._thread = threading.Thread(target=self._write, name="pipe-writer", daemon=True)
        self._thread.start()

    def send(self, data: bytes) -> None:
        """Queues every byte of `data` for the writer thread.

        Raises:
            PipeClosed: an earlier write found the reader gone (EPIPE), or `close` was called.
        """
        with self._cond:
            self._cond.wait_for(lambda: self._size < self._max or self._stopped())
            if self._stopped():
                raise PipeClosed(self._broken or "the pipe is closed")
            self._pending.append(data)
            self._size += len(data)
            self._cond.notify_all()

    def _stopped(self) -> bool:
        return self.closed or self._broken is not None

    def _write(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self.closed)
                if not self._pending:
                    return  # closed, and everything written
                batch, self._pending, self._size = b"".join(self._pending), [], 0
                self._writing = True
                self._cond.notify_all()  # room for the senders
            view = memoryview(batch)
            try:
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError as exc:  # EPIPE, EBADF: the other end is gone; later sends say so
                with self._cond:
                    self._broken = f"the pipe's reader is gone: {exc}"
            with self._cond:
                self._writing = False
                if self._broken is not None:
                    self._pending, self._size = [], 0
                self._cond.notify_all()

    def close(self, timeout_s: float = 30.0) -> None:
        """Writes what is queued (within `timeout_s`; nothing waits for a reader that is gone),
        then closes the fd: the reader sees EOF."""
        with self._cond:
            if self.closed:
                return
            self.closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
        os.close(self.fd)


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


@dataclass(frozen=True, slots=True)
class Relayed:
    """A frame to relay as it is: its kind, `final`, and every byte of it (the prefix too)."""

    kind: str
    final: bool
    data: bytes


# How encode_frame starts each relayed kind (orjson keeps the keys' order: kind, final, body).
_FINAL = {"turn_event": False, "turn_done": True, "error": True}
_PREFIXES = {
    f'{{"kind":"{kind}","final":{"true" if final else "false"},"body":{{'.encode(): (kind, final)
    for kind, final in _FINAL.items()
}
assert set(_FINAL) == RELAYED_KINDS


class RelayReader:
    """A worker's frames, from the main process's side: Relayed bytes, or a checked Frame."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()
        self._eof = False
        self._check = FrameDecoder(PIPE_KINDS)  # fed whole frames only: never out of step

    def next(self) -> Relayed | Frame | None:
        """The next frame, or None at a clean EOF.

        Raises:
            PipeBroken: a read failed, a length out of bounds, EOF in a frame, or a frame that
                is not relayed and breaks the format.
        """
        buf = self._buf
        while True:
            if len(buf) >= LENGTH_BYTES:
                n = int.from_bytes(buf[:LENGTH_BYTES], "big")
                if not 1 <= n <= MAX_FRAME_BYTES:
                    raise PipeBroken(f"a broken frame: length {n} is not 1 to {MAX_FRAME_BYTES}")
                end = LENGTH_BYTES + n
                if len(buf) >= end:
                    return self._frame(end)
            if self._eof:
                if buf:
                    raise PipeBroken(f"EOF in the middle of a frame ({len(buf)} bytes)")
                return None
            try:
                data = os.read(self.fd, READ_BYTES)
            except OSError as exc:
                raise PipeBroken(f"read failed: {exc}") from None
            self._eof = not data
            buf += data

    def _frame(self, end: int) -> Relayed | Frame:
        data = bytes(self._buf[:end])
        del self._buf[:end]
        for prefix, (kind, final) in _PREFIXES.items():
            if data.startswith(prefix, LENGTH_BYTES) and data.endswith(b"}}"):
                return Relayed(kind, final, data)
        self._check.receive_data(data)
        try:
            frame = self._check.next_frame()
        except FrameError as exc:
            raise PipeBroken(f"a broken frame: {exc}") from None
        assert isinstance(frame, Frame)  # a whole frame was fed
        if frame.kind in RELAYED_KINDS:  # only a `final` other than its kind's gets here
            raise PipeBroken(f"a broken frame: {frame.kind} with final {frame.final}")
        return frame
