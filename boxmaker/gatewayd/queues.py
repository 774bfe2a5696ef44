"""One turn at a time per session, with a bounded queue (M4 section 5). [core]

`offer` says what to do with a new post: run it now, or it waits (in order), or the queue is
full (`queue_per_session` posts wait already: one reply says so). `done` ends the running one and
gives the next, if any. Sessions are independent: a long turn in one thread holds no other.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

RUN, WAIT, FULL = "run", "wait", "full"


@dataclass
class SessionQueues(Generic[T]):
    bound: int
    _waiting: dict[str, deque[T]] = field(default_factory=dict)
    _running: set[str] = field(default_factory=set)

    def offer(self, session: str, item: T) -> str:
        if session not in self._running:
            self._running.add(session)
            return RUN
        line = self._waiting.setdefault(session, deque())
        if len(line) >= self.bound:
            return FULL
        line.append(item)
        return WAIT

    def done(self, session: str) -> T | None:
        """Ends the session's running turn; the next item to run, or None (the session is idle)."""
        line = self._waiting.get(session)
        if line:
            return line.popleft()
        self._waiting.pop(session, None)
        self._running.discard(session)
        return None

    def running(self, session: str) -> bool:
        return session in self._running

    def waiting(self, session: str) -> int:
        return len(self._waiting.get(session, ()))
