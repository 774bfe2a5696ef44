"""The whole path: fake Mattermost -> gatewayd -> a real loopd on the scripted model, and gatewayd
killed (SIGKILL) at each crash window of M4 section 6, then restarted: every owner post answered
exactly once, or with one `interrupted` reply."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from boxmaker.gatewayd.crashpoint import POINTS
from tests.support.gateway import OWNER, GatewayStack, gateway_stack, sentinel, user_refs
from tests.support.procs import wait_for
from tests.support.serve import BOUND_S, REPLY_BOUND_S, session_worker
from tests.support.turn import say

LONG = "\n\n".join(f"paragraph {i}: " + "words " * 20 for i in range(6))  # about 800 chars


@pytest.fixture
def stack() -> Iterator[GatewayStack]:
    with gateway_stack(max_post_size=700) as three:
        yield three


def parts_of(replies: list[dict[str, Any]]) -> list[str]:
    return sorted(str(r["props"]["boxmaker_part"]) for r in replies)


def test_a_dm_is_answered_once_with_typing_and_the_marker(
    stack: GatewayStack,
) -> None:
    env, fake, rig = stack
    rig.start()
    dm = fake.direct_channel(OWNER)
    env.model.load([say("hello from the box")])
    post = fake.post_as(OWNER, dm, "hi box")
    [reply] = rig.wait_replies(dm, post["id"])
    assert reply["message"] == "hello from the box"
    assert reply["root_id"] == ""
    assert reply["props"]["boxmaker_part"] == "1/1"
    sentinel(rig, dm)
    assert len(rig.replies(dm, post["id"])) == 1
    assert user_refs(env, f"mm.{dm}", f"mm:{post['id']}") == 1
    assert any(r.path.endswith("/users/me/typing") for r in fake.requests)
    # someone else's post and a webhook's with the owner's id are not answered
    other = fake.add_user("mallory")
    fake.post_as(other, fake.direct_channel(other), "answer me")
    hook = fake.post_as(OWNER, dm, "from a hook", props={"from_webhook": "true"})
    sentinel(rig, dm)
    assert rig.replies(dm, hook["id"]) == []
    assert fake.bot_posts(fake.direct_channel(other)) == []


@pytest.mark.parametrize("point", POINTS)
def test_gatewayd_killed_at_each_crash_window_answers_each_post_exactly_once(
    stack: GatewayStack, point: str
) -> None:
    env, fake, rig = stack
    rig.start()
    dm = fake.direct_channel(OWNER)
    env.model.load([say("warm up")])
    first = fake.post_as(OWNER, dm, "first")  # the session and the cursor exist
    rig.wait_replies(dm, first["id"])
    rig.stop()
    rig.crash_at(point)
    crashing = rig.start()
    env.model.load([say(LONG)])
    post = fake.post_as(OWNER, dm, "tell me a long story")
    assert crashing.wait(REPLY_BOUND_S) == -signal.SIGKILL
    assert rig.fired()
    again = rig.start()
    # the restart's catch-up has taken the post (queued before anything posted from here)
    wait_for(
        lambda: any(f"catch-up of {dm}" in ln for ln in again.err_lines),
        "the restart's catch-up",
        BOUND_S,
    )
    rig.wait_replies(dm, post["id"], 2)
    sentinel(rig, dm)
    replies = rig.replies(dm, post["id"])
    n = len(replies)
    assert parts_of(replies) == sorted(f"{i}/{n}" for i in range(1, n + 1)), "each part once"
    text = "".join(r["message"] for r in sorted(replies, key=lambda r: r["create_at"]))
    assert "paragraph 5" in text
    assert user_refs(env, f"mm.{dm}", f"mm:{post['id']}") == 1, "the turn ran once"


def test_a_turn_cut_in_loopd_and_gatewayd_gets_one_interrupted_reply(
    stack: GatewayStack,
) -> None:
    env, fake, rig = stack
    rig.start()
    dm = fake.direct_channel(OWNER)
    first = fake.post_as(OWNER, dm, "first")
    rig.wait_replies(dm, first["id"])
    rig.stop()
    rig.crash_at("during_turn")
    crashing = rig.start()
    env.model.hold()
    post = fake.post_as(OWNER, dm, "do something with tools")
    assert crashing.wait(REPLY_BOUND_S) == -signal.SIGKILL
    wait_for(lambda: env.model.waiting == 1, "the turn's completion to be asked", BOUND_S)
    daemon = env.daemons[0]
    os.kill(session_worker(daemon.pid, f"mm.{dm}"), signal.SIGKILL)  # loopd's side is cut
    again = rig.start()
    try:
        [reply] = rig.wait_replies(dm, post["id"])
    except AssertionError:
        raise AssertionError(f"{again.err_lines}") from None
    assert "interrupted" in reply["message"]
    env.model.release()
    sentinel(rig, dm)
    assert len(rig.replies(dm, post["id"])) == 1


def test_sigterm_during_a_turn_stops_gatewayd_at_once_and_the_restart_answers(
    stack: GatewayStack,
) -> None:
    env, fake, rig = stack
    gw = rig.start()
    dm = fake.direct_channel(OWNER)
    first = fake.post_as(OWNER, dm, "first")
    rig.wait_replies(dm, first["id"])
    env.model.hold()
    post = fake.post_as(OWNER, dm, "a slow one")
    wait_for(lambda: env.model.waiting == 1, "the turn's completion to be asked", BOUND_S)
    assert gw.stop(signal.SIGTERM, BOUND_S) == 0, "the turn in its thread held the exit"
    env.model.load([say("the slow answer")])
    env.model.release()
    rig.start()
    [reply] = rig.wait_replies(dm, post["id"])
    assert reply["message"] == "the slow answer"
    assert user_refs(env, f"mm.{dm}", f"mm:{post['id']}") == 1


@pytest.mark.parametrize("crash", ["", "before_turn", "after_turn", "after_post"])
def test_a_first_ever_dm_sent_before_gatewayd_ever_ran_is_answered_once(
    stack: GatewayStack, crash: str
) -> None:
    """The owner opens the DM and writes before gatewayd has ever run (no cursor, no live
    event of that channel): the start knows the DM (channels/direct) and catches it up; a kill
    -9 of that first start at a crash window changes nothing."""
    env, fake, rig = stack
    dm = fake.direct_channel(OWNER)
    env.model.load([say("first answer")])
    post = fake.post_as(OWNER, dm, "are you there?")
    if crash:
        rig.crash_at(crash)
        crashing = rig.start(wait=False)
        assert crashing.wait(REPLY_BOUND_S) == -signal.SIGKILL, crashing.err_lines
        assert rig.fired()
    rig.start()
    [reply] = rig.wait_replies(dm, post["id"])
    assert reply["message"] == "first answer"
    sentinel(rig, dm)
    assert len(rig.replies(dm, post["id"])) == 1
    assert user_refs(env, f"mm.{dm}", f"mm:{post['id']}") == 1, "the turn ran once"
    assert any(r.path == "/api/v4/channels/direct" for r in fake.requests)


@pytest.mark.parametrize("root", ["unknown", "deleted"])
def test_a_reply_whose_thread_root_is_gone_is_answered_once_beside_it(
    stack: GatewayStack, root: str
) -> None:
    """The server has no such root (never had it, or it was deleted): the thread cannot be read
    and a reply into it is refused ("Invalid RootId"); the answer goes beside it, once."""
    env, fake, rig = stack
    rig.start()
    dm = fake.direct_channel(OWNER)
    if root == "unknown":
        root_id = "zzzzzzzzzzzzzzzzzzzzzzzzzz"
    else:
        first = fake.post_as(OWNER, dm, "start a thread")
        rig.wait_replies(dm, first["id"])
        root_id = str(first["id"])
        fake.delete_post(root_id)
    env.model.load([say("beside the thread")])
    post = fake.post_as(OWNER, dm, "in a thread that is gone", root_id=root_id)
    [reply] = rig.wait_replies(dm, post["id"])
    assert (reply["message"], reply["root_id"]) == ("beside the thread", "")
    sentinel(rig, dm)
    assert len(rig.replies(dm, post["id"])) == 1
