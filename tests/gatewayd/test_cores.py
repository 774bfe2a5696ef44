"""gatewayd's small cores: session places, the per-session queue, the marker, the catch-up plan,
the cursor, the chat's messages."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.gatewayd.catchup import Cursor, plan
from boxmaker.gatewayd.mattermost.types import Post
from boxmaker.gatewayd.messages import approval_post, code_block, error_post, escaped
from boxmaker.gatewayd.queues import FULL, RUN, WAIT, SessionQueues
from boxmaker.gatewayd.replies import missing, posted_parts, reply_props
from boxmaker.gatewayd.sessions import client_ref, place_of
from boxmaker.proto import ErrorCode, WireError
from boxmaker.proto.ids import is_client_ref, is_session_id

CH = "4ckrmjaeeb8mbpodbmo6bknpge"
ROOT = "a4aurxyyc3yruntz4zfmdw75nr"
PID = "5greg5b4w3rojmqc188znn8s7c"
BOT = "xei6dqz8xfgm7kqzddjziyofyo"


def post(**changes: Any) -> Post:
    p = Post(PID, CH, "u", "", "hi", "", {}, 1000, ())
    return replace(p, **changes)


def test_places_dm_and_threads() -> None:
    assert place_of(post(), "D").session == f"mm.{CH}"
    assert place_of(post(), "D").root_id == ""
    assert place_of(post(root_id=ROOT), "D").root_id == ROOT  # answered in the owner's thread
    assert place_of(post(), "O").session == f"mm.{CH}.{PID}"  # a top-level post starts one
    assert place_of(post(), "O").root_id == PID
    thread = place_of(post(root_id=ROOT), "P")
    assert (thread.session, thread.root_id) == (f"mm.{CH}.{ROOT}", ROOT)
    assert is_session_id(thread.session)
    assert is_client_ref(client_ref(post()))
    with pytest.raises(ValueError, match="session id"):
        place_of(post(channel_id="x/../y"), "D")


def test_one_turn_at_a_time_per_session_with_a_bound() -> None:
    q: SessionQueues[str] = SessionQueues(2)
    assert q.offer("a", "1") == RUN
    assert q.offer("b", "x") == RUN  # another session is not held
    assert [q.offer("a", i) for i in "234"] == [WAIT, WAIT, FULL]
    assert q.waiting("a") == 2
    assert q.done("a") == "2"
    assert q.offer("a", "5") == WAIT
    assert [q.done("a"), q.done("a"), q.done("a")] == ["3", "5", None]
    assert not q.running("a")
    assert q.offer("a", "6") == RUN


def test_the_marker_says_which_parts_are_posted() -> None:
    mine = [post(id=f"r{i}", user_id=BOT, props=reply_props(PID, i, 3)) for i in (1, 3)]
    others = [
        post(id="o1", user_id="owner", props=reply_props(PID, 2, 3)),  # not the bot's
        post(id="o2", user_id=BOT, props=reply_props("another", 2, 3)),
    ]
    got = posted_parts([*mine, *others], BOT, PID)
    assert got == {1, 3}
    assert missing(3, got) == [2]
    assert missing(1, set()) == [1]
    assert missing(2, {1, 2}) == []


def test_catchup_answers_the_newest_fresh_posts_and_notes_the_rest() -> None:
    posts = [post(id=f"p{i}", create_at=i * 1000) for i in range(10)]
    got = plan(posts, now_ms=10_000, max_posts=3, max_age_s=5)
    assert [p.id for p in got.answer] == ["p7", "p8", "p9"]
    assert [p.id for p in got.skipped] == [f"p{i}" for i in range(7)]
    fresh = plan(posts[8:], now_ms=10_000, max_posts=3, max_age_s=5)
    assert (len(fresh.answer), fresh.skipped) == (2, ())


def test_the_cursor_never_passes_a_post_in_flight() -> None:
    c = Cursor("p0")
    for p in ("p1", "p2", "p3"):
        c.take(p)
    assert c.finish("p2") is None
    assert c.at == "p0"
    assert c.finish("p1") == "p2"
    assert c.skip("p4") is None  # p3 is still in flight
    assert c.finish("p3") == "p4"
    assert c.at == "p4"


def test_untrusted_text_is_escaped_and_fenced() -> None:
    summary = "ls\u202e -la\x1b[2J ``` `rm`"
    shown = code_block(summary)
    assert "\u202e" not in shown
    assert "\x1b" not in shown
    assert "\\u202e" in shown
    assert shown.startswith("````\n")
    assert shown.endswith("\n````")
    assert escaped("a\tb\nc") == "a\\u0009b\nc"
    assert "bxctl approve" in approval_post("shell", summary, "mm.x")


def test_the_cursor_keeps_channel_order_whatever_the_taking_order() -> None:
    """A catch-up takes older posts after a live one came: the live one finishing first must
    not move the cursor past the older ones still in flight."""
    c = Cursor("p0")
    c.take("p9", 9)  # live
    c.take("p5", 5)  # found by the catch-up, older
    assert c.finish("p9") is None
    assert c.at == "p0"
    assert c.finish("p5") == "p9"


def test_a_held_cursor_does_not_move_until_released() -> None:
    c = Cursor("p0")
    c.hold()
    assert c.skip("p3", 3) is None  # a refused live post while a catch-up is due
    assert c.at == "p0"
    c.take("p1", 1)  # the catch-up finds an older one
    assert c.release() is None  # p1 is in flight
    assert c.finish("p1") == "p3"


def test_a_cursor_never_moves_back() -> None:
    c = Cursor("p0")
    assert c.skip("p5", 5) == "p5"
    assert c.skip("p2", 2) is None  # found again by a late catch-up: already behind
    assert c.at == "p5"


def test_open_before_says_whether_an_older_post_is_in_flight() -> None:
    c = Cursor(None)
    c.take("p2", 2)
    c.take("p1", 1)
    assert c.open_before("p2")
    assert not c.open_before("p1")
    c.finish("p1")
    assert not c.open_before("p2")


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(1, 12)),
        st.tuples(st.just("skip"), st.integers(1, 12)),
        st.tuples(st.just("finish"), st.integers(1, 12)),
        st.tuples(st.just("hold"), st.just(0)),
        st.tuples(st.just("release"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=1000)  # a core: a thousand orders take about a second
@given(STEPS)
def test_the_cursor_never_passes_a_post_in_flight_whatever_the_order(
    steps: list[tuple[str, int]],
) -> None:
    """Posts p1..p12 in channel order, taken, skipped and finished in any order, with holds:
    the cursor never stands at or past a taken post not finished, never moves while held, and
    never moves back. As the shell brings them: live posts come in channel order, and a post
    older than one seen comes only from a catch-up (after the cursor, while it is held)."""
    c = Cursor("p0")
    taken: set[int] = set()
    done: set[int] = set()
    holds = 0
    at = 0
    for op, n in steps:
        before = c.at
        can_see = n not in taken and n > at and (holds > 0 or n > max(taken, default=0))
        if op == "take" and can_see:
            taken.add(n)
            c.take(f"p{n}", n)
        elif op == "skip" and can_see:
            taken.add(n)
            done.add(n)
            c.skip(f"p{n}", n)
        elif op == "finish" and n in taken and n not in done:
            done.add(n)
            c.finish(f"p{n}")
        elif op == "hold":
            holds += 1
            c.hold()
        elif op == "release" and holds:
            holds -= 1
            c.release()
        assert c.at is not None
        now = int(c.at[1:])
        if holds:
            assert c.at == before, "a held cursor moved"
        assert now >= at, "the cursor moved back"
        at = now
        assert all(n > now for n in taken - done), f"the cursor {c.at} passed a post in flight"


def test_a_turn_limit_post_shows_what_the_turn_changed_fenced() -> None:
    """loopd's turn_limit message names what the turn wrote before it ended (paths the model
    chose): shown, escaped and fenced; the other errors stay one line of what to do."""
    message = (
        "a repeated tool call was repeated again (repeat_detection), so the turn ends. "
        "Done before it ended: wrote ````x\u202e.txt: 3 bytes."
    )
    post = error_post(WireError(ErrorCode.TURN_LIMIT, message), "s1")
    head, fenced = post.split("\n", 1)
    assert head.startswith("**turn_limit**: The turn hit its tool-call limit before it answered.")
    assert fenced == code_block(message)
    assert "wrote ````x\\u202e.txt: 3 bytes." in fenced
    assert fenced.startswith("`````\n")
    other = error_post(WireError(ErrorCode.STOPPED, "stopped by bxctl"), "s1")
    assert "\n" not in other
    assert "stopped by bxctl" not in other
