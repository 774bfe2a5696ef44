"""What a catch-up answers, and the channel cursor (M4 section 6 "Catch-up"). [core]

After every start and every reconnect that was not a lossless resume, gatewayd pages each
channel forward from its cursor (`after=<post id>`). Of the allowed posts found, those younger
than `catchup_max_age_s`, newest `catchup_max_posts` of them, are answered as if they had just
arrived; the others get one notice (a reply to the newest of them) naming how many were not
answered, never a turn each.

`Cursor` moves a channel's cursor only past posts that are finished, in order: sessions run side
by side, so a later post may finish before an earlier one, and the cursor never passes a post
that is still being answered.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from boxmaker.gatewayd.mattermost.types import Post


@dataclass(frozen=True, slots=True)
class Plan:
    answer: tuple[Post, ...]  # oldest first
    skipped: tuple[Post, ...]  # too old or too many: one notice for all


def plan(posts: Sequence[Post], now_ms: int, max_posts: int, max_age_s: int) -> Plan:
    """`posts`: the allowed posts found after the cursor, oldest first."""
    fresh = [p for p in posts if now_ms - p.create_at <= max_age_s * 1000]
    answer = fresh[-max_posts:] if fresh else []
    chosen = {p.id for p in answer}
    return Plan(tuple(answer), tuple(p for p in posts if p.id not in chosen))


def notice(skipped: int, max_posts: int, max_age_s: int) -> str:
    what = "message was" if skipped == 1 else "messages were"
    return (
        f"{skipped} earlier {what} not answered: sent while I was away and older than "
        f"{max_age_s} s or beyond the {max_posts} newest (catchup_max_age_s, catchup_max_posts). "
        "Send again what you still want answered."
    )


@dataclass
class Cursor:
    """One channel's cursor: the last post id such that it and every post before it that
    gatewayd took are finished.

    Posts are kept in channel order (`order`: their create_at), not in the order they were
    taken: a catch-up takes older posts after a live one already came. While the cursor is
    held (a catch-up is due or running: posts older than the live ones may be unseen yet), it
    does not move at all; `release` moves it past what finished meanwhile.
    """

    at: str | None
    held: int = 0
    _open: list[tuple[int, str]] = field(default_factory=list)  # taken, in channel order
    _done: set[str] = field(default_factory=set)
    _at_order: int | None = None

    def take(self, post_id: str, order: int | None = None) -> None:
        if any(pid == post_id for _, pid in self._open):
            return
        key = order if order is not None else (self._open[-1][0] if self._open else 0)
        bisect.insort(self._open, (key, post_id), key=lambda e: e[0])

    def finish(self, post_id: str) -> str | None:
        """Marks `post_id` finished; the new cursor when it moved, else None."""
        self._done.add(post_id)
        return self._advance()

    def skip(self, post_id: str, order: int | None = None) -> str | None:
        """A post seen and not taken (refused, or an event of the bot's own): finished at once."""
        self.take(post_id, order)
        return self.finish(post_id)

    def open_before(self, post_id: str) -> bool:
        """Whether a post taken before `post_id` in channel order is not finished yet."""
        for _, pid in self._open:
            if pid == post_id:
                return False
            if pid not in self._done:
                return True
        return False

    def hold(self) -> None:
        self.held += 1

    def release(self) -> str | None:
        """One hold off; the new cursor when that let it move, else None."""
        self.held = max(0, self.held - 1)
        return self._advance()

    def _advance(self) -> str | None:
        if self.held:
            return None
        moved: tuple[int, str] | None = None
        while self._open and self._open[0][1] in self._done:
            moved = self._open.pop(0)
            self._done.discard(moved[1])
        if moved is None or (self._at_order is not None and moved[0] < self._at_order):
            return None  # never back past where it was
        self._at_order, self.at = moved
        return self.at
