"""The socket's sequence and resume rules, the reconnect backoff and the 429 wait [core]

The server's side of these rules (server/channels/app/platform/web_conn.go): a fresh connection
gets `hello` (seq 0) carrying `connection_id`, then each event has the next seq. A resume names the
id and the seq wanted next; the server replays from its dead queue with no new hello, or, when it
cannot, sends a new hello with a new id (ws/reconnect.constructed.txt). So a lossless resume is
silent, and everything else is said by a hello or a seq gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from urllib.parse import urlencode

from .types import Connected, MattermostError, Posted, parse_event, posted_from

Item = Posted | Connected


@dataclass
class SocketState:
    """What the client knows of its connection across sockets: the id, the seq wanted next."""

    connection_id: str = ""
    next_seq: int | None = None  # None until the first hello or event
    lost: int = field(default=0)  # lossy Connected yielded so far (gaps, new hellos, bad frames)
    _resuming: bool = field(default=False, repr=False)
    _replaying: bool = field(default=False, repr=False)  # a resume's overlap: old seqs are fine

    def url(self, ws_url: str) -> str:
        """The upgrade URL: plain for a first connect, with the resume query after."""
        if not self.connection_id or self.next_seq is None:
            return ws_url
        query = urlencode({"connection_id": self.connection_id, "sequence_number": self.next_seq})
        return f"{ws_url}?{query}"

    def opened(self) -> None:
        """After an upgrade. A resume is lossless if the server's first frame is not a hello and
        not past a gap; it sends nothing at all when nothing happened, so nothing is said then."""
        self._resuming = bool(self.connection_id) and self.next_seq is not None
        self._replaying = False

    def feed(self, text: str | bytes) -> list[Item]:
        """One frame in; the Posted and Connected it means out (other events are dropped)."""
        try:
            event = parse_event(text)
        except MattermostError:
            self._resuming = False
            return self._lossy()  # what it held is fetched over REST
        if event is None:
            return []
        if event.event == "hello":
            self._resuming = False
            return self._hello(event.data.get("connection_id"), event.seq)
        out: list[Item] = []
        if self._resuming:
            self._resuming = False
            if event.seq is None or self.next_seq is None or event.seq <= self.next_seq:
                out.append(Connected(self.connection_id, lossless=True))
                self._replaying = True
        if event.seq is not None:
            if self.next_seq is not None and event.seq < self.next_seq:
                if self._replaying or event.seq == self.next_seq - 1:
                    return out  # the resume's overlap, or the last event again: already seen
                # Further back and no replay: the server's numbering went back (a restart or
                # another node that said no hello). What came meanwhile is unknown: catch up, and
                # take this event (gatewayd knows the posts it took by id).
                out += self._lossy()
            elif self.next_seq is not None and event.seq > self.next_seq:
                out += self._lossy()
            self._replaying = False
            self.next_seq = event.seq + 1
        if event.event == "posted":
            try:
                out.append(posted_from(event))
            except MattermostError:
                out += self._lossy()
        return out

    def _hello(self, connection_id: object, seq: int | None) -> list[Item]:
        cid = connection_id if isinstance(connection_id, str) else ""
        # The same id at the seq we wanted is a server that says hello on resume: nothing lost.
        same = bool(cid) and cid == self.connection_id and seq == self.next_seq
        self.connection_id = cid
        self.next_seq = (seq or 0) + 1
        if same:
            return [Connected(cid, lossless=True)]
        return self._lossy()

    def _lossy(self) -> list[Item]:
        self.lost += 1
        return [Connected(self.connection_id, lossless=False)]


def backoff_ms(attempt: int, base_ms: int, cap_ms: int, unit: float) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)]; `unit` is random() in [0, 1)."""
    return unit * float(min(cap_ms, base_ms * 2 ** min(attempt, 30)))


def retry_wait_s(headers: Mapping[str, str], now_epoch_s: float) -> float | None:
    """How long a 429 asks us to wait, in seconds: Retry-After, else X-RateLimit-Reset.

    Retry-After is seconds or an HTTP date (RFC 9110). Mattermost's X-RateLimit-Reset is the
    seconds until the limit resets (rest/429_rate_limited.docs.http: `1`); a value that can only
    be an epoch time is taken as one. None when neither says anything usable.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    after = lower.get("retry-after", "").strip()
    if after:
        try:
            return max(0.0, float(after))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(after).timestamp() - now_epoch_s)
            except (TypeError, ValueError):
                pass
    reset = lower.get("x-ratelimit-reset", "").strip()
    if reset:
        try:
            value = float(reset)
        except ValueError:
            return None
        return max(0.0, value - now_epoch_s) if value > 1e9 else max(0.0, value)
    return None
