"""gatewayd against a server that says more than the fake's plain path (issue 36, the held-out
suite's "other event orders and spellings"): other events between and about the owner's posts
(an edit, a reaction, a deletion, typing, status, channel_viewed, events of unknown names and
shapes), in both spellings of the wire; and a post that comes both live and by a catch-up, with
gatewayd killed between two answers. Every owner post is answered exactly once."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.support.gateway import OWNER, GatewayStack, gateway_stack, sentinel, user_refs
from tests.support.mattermost.wire import STYLES
from tests.support.procs import wait_for
from tests.support.serve import BOUND_S, REPLY_BOUND_S
from tests.support.turn import say


@pytest.fixture(params=STYLES)
def stack(request: pytest.FixtureRequest) -> Iterator[GatewayStack]:
    with gateway_stack(style=request.param) as three:
        yield three


def test_edits_reactions_deletions_and_other_events_answer_nothing_again(
    stack: GatewayStack,
) -> None:
    env, fake, rig = stack
    rig.start()
    dm = fake.direct_channel(OWNER)
    env.model.load([say("first answer")])
    post = fake.post_as(OWNER, dm, "what is 2 + 2?")
    [reply] = rig.wait_replies(dm, post["id"])
    fake.edit_post(post["id"], "what is 3 + 3?")  # after its answer: not answered again
    fake.react(OWNER, post["id"], "eyes")
    fake.react(OWNER, str(reply["id"]), "+1")
    fake.set_status(OWNER, "online")
    fake.emit("typing", {"parent_id": "", "user_id": OWNER}, channel_id=dm)
    fake.emit("channel_viewed", {"channel_id": dm}, channel_id=dm)
    fake.emit("a_plugin_event", {"post": "not a post"}, channel_id=dm)
    gone = fake.post_as(OWNER, dm, "never mind this one", props={"from_bot": "true"})
    fake.delete_post(gone["id"])
    fake.edit_post(post["id"], "what is 4 + 4?")
    sentinel(rig, dm)
    rig.stop()  # and a restart's catch-up sees the edited post again
    rig.start()
    sentinel(rig, dm)
    assert rig.replies(dm, post["id"]) == [reply]
    assert rig.replies(dm, gone["id"]) == []
    assert user_refs(env, f"mm.{dm}", f"mm:{post['id']}") == 1
    said = rig.daemons[0].err_lines
    assert sum("socket connected; catching up" in ln for ln in said) == 1, (
        f"an event gatewayd does not read made the socket lossy: {said}"
    )


def test_a_post_both_live_and_caught_up_is_answered_once_across_a_kill(
    stack: GatewayStack,
) -> None:
    """A lost event (a seq gap): the next post comes live and makes a catch-up, which finds the
    lost post and the live one again. The live one is answered first (it was taken first); gatewayd
    is killed before the older one's turn: the restart must still answer it (the cursor did not
    move past it when the newer one finished), and neither twice."""
    env, fake, rig = stack
    dm = fake.direct_channel(OWNER)
    rig.crash_at("before_turn", 2)
    crashing = rig.start()
    # the start's own catch-up read the DM empty: else it may find the lost post and answer it
    # first, and the live one's turn is the one killed (waited 150 s for its reply)
    wait_for(
        lambda: any(f"catch-up of {dm}: 0 post(s)" in ln for ln in crashing.err_lines),
        "the start's catch-up",
        BOUND_S,
    )
    env.model.load([say("answer to the live one")])
    fake.lose_next(1)
    lost = fake.post_as(OWNER, dm, "the lost one")
    live = fake.post_as(OWNER, dm, "the live one")
    rig.wait_replies(dm, live["id"])
    assert crashing.wait(REPLY_BOUND_S) == -signal.SIGKILL, crashing.err_lines
    env.model.load([say("answer to the lost one")])
    again = rig.start()
    wait_for(
        lambda: any(f"catch-up of {dm}" in ln for ln in again.err_lines),
        "the restart's catch-up",
        BOUND_S,
    )
    [answer] = rig.wait_replies(dm, lost["id"])
    assert answer["message"] == "answer to the lost one"
    sentinel(rig, dm)
    assert len(rig.replies(dm, live["id"])) == 1
    assert len(rig.replies(dm, lost["id"])) == 1
    for p in (lost, live):
        assert user_refs(env, f"mm.{dm}", f"mm:{p['id']}") == 1


def test_an_old_server_without_connection_id_answers_each_post_once_across_drops() -> None:
    """A server whose hello has no connection_id (ws/hello.docs.json) cannot resume: every drop
    is a fresh connect and a catch-up; a post sent while the socket is down is answered once."""
    with gateway_stack(old_server=True) as (_, fake, rig):
        gw = rig.start()
        dm = fake.direct_channel(OWNER)
        first = fake.post_as(OWNER, dm, "one")
        rig.wait_replies(dm, first["id"])
        fake.go_deaf()  # the socket dies and the next upgrades hang until wake()
        fake.drop_after(0)
        away = fake.post_as(OWNER, dm, "sent while the socket is down")
        fake.wake()
        wait_for(
            lambda: sum("socket connected" in ln for ln in gw.err_lines) >= 2,
            "a fresh connect",
            BOUND_S,
        )
        rig.wait_replies(dm, away["id"])
        sentinel(rig, dm)
        assert len(rig.replies(dm, away["id"])) == 1
        assert len(rig.replies(dm, first["id"])) == 1
        assert all("connection_id" not in u.query for u in fake.upgrades)
