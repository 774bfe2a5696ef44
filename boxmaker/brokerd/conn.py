"""One framed connection (blocking, with a timeout): recv a frame, send a frame."""

from __future__ import annotations

import socket
from collections.abc import Collection
from typing import Any

from boxmaker.proto.frame import CLOSED, NEED_DATA, Frame, FrameDecoder, encode_frame

RECV_BYTES = 65536


class Conn:
    def __init__(self, sock: socket.socket, kinds: Collection[str]) -> None:
        self.sock = sock
        self.kinds = kinds
        self.decoder = FrameDecoder(kinds)

    def recv(self) -> Frame | None:
        """The next frame, or None at EOF. Raises FrameError on a malformed one, OSError."""
        while True:
            got = self.decoder.next_frame()
            if got is CLOSED:
                return None
            if got is not NEED_DATA:
                assert isinstance(got, Frame)
                return got
            self.decoder.receive_data(self.sock.recv(RECV_BYTES))

    def send(self, kind: str, body: dict[str, Any], final: bool) -> None:
        self.sock.sendall(encode_frame(kind, body, final, self.kinds))

    def error(self, message: str) -> None:
        self.send("error", {"code": "bad_request", "message": message}, True)
