"""One framed Unix-socket connection: the frames of proto.frame over a blocking socket with a
timeout.

`Framed` is both ends' (brokerd's connections, brokerd.conn); `FramedClient` connects, and
brokerd's clients share it: loopd's BrokerPort on broker.sock, bxctl chat's approvals on
owner.sock, and the tests' clients of both. Frames of the given kinds; `recv` gives None at the
peer's end, `exchange` sends one request and yields frames up to the final.
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Iterator
from types import TracebackType
from typing import Any

from boxmaker.proto.frame import CLOSED, NEED_DATA, Frame, FrameDecoder, encode_frame

RECV_BYTES = 65536


class Framed:
    """Frames of the given kinds over a connected socket (brokerd's side and its clients')."""

    def __init__(self, sock: socket.socket, kinds: Collection[str]) -> None:
        self.sock = sock
        self.kinds = kinds
        self._decoder = FrameDecoder(kinds)

    def send(self, kind: str, body: dict[str, Any], final: bool = True) -> None:
        self.sock.sendall(encode_frame(kind, body, final, self.kinds))

    def recv(self) -> Frame | None:
        """The next frame, or None at the peer's end. Raises ProtocolError on a malformed
        frame, TimeoutError past the timeout, OSError."""
        while True:
            got = self._decoder.next_frame()
            if got is CLOSED:
                return None
            if got is not NEED_DATA:
                assert isinstance(got, Frame)
                return got
            self._decoder.receive_data(self.sock.recv(RECV_BYTES))

    def close(self) -> None:
        self.sock.close()


class FramedClient(Framed):
    def __init__(self, path: str, kinds: Collection[str], timeout_s: float) -> None:
        """Connects to `path`. Raises OSError (FileNotFoundError, ConnectionRefusedError...)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        super().__init__(sock, kinds)

    def exchange(self, kind: str, body: dict[str, Any]) -> Iterator[Frame]:
        """Sends one request; yields each frame of the answer, the final one last. Raises
        ConnectionResetError when the peer closes before the final frame."""
        self.send(kind, body, True)
        while True:
            frame = self.recv()
            if frame is None:
                raise ConnectionResetError("the peer closed the connection mid-answer")
            yield frame
            if frame.final:
                return

    def __enter__(self) -> FramedClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
