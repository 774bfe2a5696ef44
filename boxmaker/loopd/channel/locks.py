"""The per-session lock registry of loopd's main process (M2b section 8).

A turn takes its session's lock before it goes to a worker and gives it back just before its
final frame is sent, whichever frame that is. A second turn on a session whose lock is taken is
answered `session_busy` at once: nobody waits. The worker's flock on the log is the kernel's
guard behind this one (a worker left over from a killed loopd still holds it).
"""

from __future__ import annotations

import threading


class SessionLocks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()

    def try_acquire(self, session: str) -> bool:
        """Takes the session's lock; False (at once) when a turn already holds it."""
        with self._lock:
            if session in self._held:
                return False
            self._held.add(session)
            return True

    def release(self, session: str) -> None:
        """Gives the session's lock back. Doing it twice does nothing."""
        with self._lock:
            self._held.discard(session)
