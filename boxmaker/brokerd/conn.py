"""brokerd's side of one framed connection (blocking, with a timeout)."""

from __future__ import annotations

from boxmaker._framed import Framed


class Conn(Framed):
    def error(self, message: str) -> None:
        self.send("error", {"code": "bad_request", "message": message}, True)
