"""The channel's connections (M2b section 6): one `turn` in, its frames out, one thread each.

A connection must send its whole `turn` frame within `[channel] first_frame_ms`, and nothing after
it (a second frame that came with it is refused before the turn runs). A frame that
breaks the format, or a body that is not a turn, gets one `error{bad_request}` saying what was
wrong, and the connection is closed. A turn on a session whose lock is taken gets `session_busy`
at once. Otherwise the turn goes to its session's worker (workers/pool.py), and what the worker
sends back is relayed here in order.

The worker's reader thread only queues frames for this connection; this thread sends them, each
within `send_timeout_ms`. So a client that stops reading holds up its own connection and nothing
else, and a client that is gone (or too slow) is dropped while its turn runs on to the end and is
logged: the rest of its frames are read and discarded.

While the turn runs, a thread of the connection's own reads what the client sends after its
turn: a `cancel` frame (issue 30, Ctrl-C in `bxctl chat`) stops the turn (`Pool.cancel`: the
worker ends it with `error{stopped}` and a `stopped` record); the client's close, or anything
else, is the end of listening and stops nothing, so a client that is gone still has its turn
finished and logged. The listener runs until the relay has sent the last frame, which is after
the session's lock was given back: the cancel names the connection's turn by the id the pool
gave it, so a late one stops nothing, least of all the session's next turn (issue 38.1).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

from boxmaker._daemon.log import DaemonLog
from boxmaker.loopd.config import ChannelConfig
from boxmaker.loopd.workers.pool import Pool, TurnSink, Unavailable
from boxmaker.loopd.workers.wire import parse_turn
from boxmaker.proto import ErrorCode
from boxmaker.proto.channel import CANCEL, CANCEL_KINDS
from boxmaker.proto.errors import ProtocolError
from boxmaker.proto.frame import CLOSED, NEED_DATA, Frame, FrameDecoder, error_frame

from .locks import SessionLocks

RECV_BYTES = 65_536
RELAY_BATCH_BYTES = 262_144  # queued frames joined into one send, up to about this much


class ChannelServer:
    def __init__(
        self, config: ChannelConfig, pool: Pool, locks: SessionLocks, log: DaemonLog
    ) -> None:
        self.config = config
        self.pool = pool
        self.locks = locks
        self.log = log
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._reading: set[socket.socket] = set()  # connections still sending their turn

    def on_client(self, sock: socket.socket) -> None:
        """Takes an accepted connection (its peer checked) and serves it on a thread of its own."""
        thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def stop_reading(self) -> None:
        """Ends the connections that have not sent their turn yet (loopd is stopping)."""
        with self._lock:
            waiting = list(self._reading)
        for sock in waiting:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # their recv() returns b"": closed unanswered

    def join(self, timeout_s: float) -> int:
        """Waits (bounded) for the connections to end; returns how many are still open."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in threads)

    def _serve(self, sock: socket.socket) -> None:
        try:
            self._serve_turn(sock)
        except Exception as exc:  # a bug: say so to the client and in the log, keep serving
            self.log.warn(f"a connection failed: {type(exc).__name__}: {exc}")
            self._send(sock, error_frame(ErrorCode.INTERNAL, f"loopd failed: {exc}"))
        finally:
            sock.close()
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _serve_turn(self, sock: socket.socket) -> None:
        with self._lock:
            self._reading.add(sock)
        try:
            frame = self._first_frame(sock)
        finally:
            with self._lock:
                self._reading.discard(sock)
        if frame is None:
            return
        try:
            request = parse_turn(frame)
        except ProtocolError as exc:
            self._refuse(sock, str(exc))
            return
        session = request.session
        if not self.locks.try_acquire(session):
            self._send(
                sock,
                error_frame(
                    ErrorCode.SESSION_BUSY,
                    f"session {session} is running a turn; send this one once it has finished",
                ),
            )
            return
        outbox: queue.SimpleQueue[tuple[bytes, bool]] = queue.SimpleQueue()
        sink = TurnSink(
            deliver=lambda data, final: outbox.put((data, final)),
            on_final=lambda: self.locks.release(session),
        )
        try:
            turn_id = self.pool.start_turn(request, sink)
        except Unavailable as exc:
            self.locks.release(session)
            self._send(sock, error_frame(ErrorCode.UNAVAILABLE, str(exc)))
            return
        except BaseException:
            self.locks.release(session)  # no turn was started: nothing else will release it
            raise
        listening = threading.Thread(
            target=self._listen_for_cancel, args=(sock, session, turn_id), daemon=True
        )
        listening.start()
        try:
            self._relay(sock, outbox)
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # the listener's recv() returns: it ends
            listening.join(self.config.send_timeout_ms / 1000)

    def _listen_for_cancel(self, sock: socket.socket, session: str, turn_id: int) -> None:
        """Reads the client's side until it closes: a `cancel` frame stops the turn."""
        try:
            self._listen(sock, session, turn_id)
        except Exception as exc:  # a bug: said, so a lost cancel is never silent
            self.log.warn(f"session {session}: the cancel listener failed: {exc!r}")

    def _listen(self, sock: socket.socket, session: str, turn_id: int) -> None:
        decoder = FrameDecoder(CANCEL_KINDS)
        while True:
            try:
                data = sock.recv(RECV_BYTES)
            except TimeoutError:  # the relay's send bound is the socket's: keep listening
                continue
            except OSError as exc:
                self.log.say(f"session {session}: stopped listening for a cancel: {exc}")
                return
            if not data:
                return
            decoder.receive_data(data)
            try:
                frame = decoder.next_frame()
            except ProtocolError as exc:
                self.log.warn(f"session {session}: after its turn the client sent {exc}")
                return
            if isinstance(frame, Frame) and frame.kind == CANCEL:
                # This connection's turn, by its id: its final frame may have come already
                # (its last frames still being sent here) and the session run another's turn.
                if self.pool.cancel(session, turn_id):
                    self.log.say(f"session {session}: the client stopped its turn")
                else:
                    self.log.say(
                        f"session {session}: the client's cancel came after its turn ended; "
                        "nothing stopped"
                    )
                return

    def _relay(self, sock: socket.socket, outbox: queue.SimpleQueue[tuple[bytes, bool]]) -> None:
        sock.settimeout(self.config.send_timeout_ms / 1000)
        reading = True
        while True:
            data, final = outbox.get()
            # Frames that queued up while the last send ran go out in one send: under a fast
            # stream that is one syscall for many events instead of one each.
            parts, size = [data], len(data)
            while not final and size < RELAY_BATCH_BYTES:
                try:
                    data, final = outbox.get_nowait()
                except queue.Empty:
                    break
                parts.append(data)
                size += len(data)
            if reading:
                try:
                    sock.sendall(b"".join(parts))
                except OSError:  # gone, or not reading within send_timeout_ms
                    reading = False  # the turn goes on; its frames are dropped from here
            if final:
                return

    def _first_frame(self, sock: socket.socket) -> Frame | None:
        """The connection's first frame, or None once it has been answered or closed."""
        decoder = FrameDecoder()
        limit_s = self.config.first_frame_ms / 1000
        deadline = time.monotonic() + limit_s
        while True:
            try:
                frame = decoder.next_frame()
            except ProtocolError as exc:
                self._refuse(sock, str(exc))
                return None
            if frame is CLOSED:
                return None  # connected and closed without a word
            if frame is not NEED_DATA and decoder.buffered:
                # One turn per connection: a second frame (or anything) sent with the first
                # would go unread; refused before anything is run, so nothing is lost.
                self._refuse(
                    sock,
                    f"one turn per connection: {decoder.buffered} more byte(s) came after the "
                    "turn frame; nothing was run. Send each turn on a connection of its own",
                )
                return None
            if frame is not NEED_DATA:
                return frame
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                data = sock.recv(RECV_BYTES)
            except TimeoutError:
                self._refuse(
                    sock,
                    f"no whole turn frame within {self.config.first_frame_ms} ms "
                    "([channel] first_frame_ms); closing",
                )
                return None
            except OSError:
                return None
            decoder.receive_data(data)

    def _refuse(self, sock: socket.socket, why: str) -> None:
        """One bad_request and the end of the connection."""
        self._send(sock, error_frame(ErrorCode.BAD_REQUEST, why))
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    def _send(self, sock: socket.socket, data: bytes) -> None:
        with contextlib.suppress(OSError):
            sock.settimeout(self.config.send_timeout_ms / 1000)
            sock.sendall(data)
