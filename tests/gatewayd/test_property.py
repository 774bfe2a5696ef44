"""A property over random interleavings (M4 section 6): owner posts and refused posts, socket
drops (resumed losslessly, or lossy: a new hello and a catch-up), lost events (a seq gap),
gatewayd killed at a crash window or at once, loopd restarted. Whatever the order: every allowed
post is answered exactly once (each part once; an error or `interrupted` reply counts as its
answer), and no refused post is answered.

Each example is slow (real processes): BOXMAKER_GATEWAY_EXAMPLES sets how many (3 in make test).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from boxmaker.gatewayd.crashpoint import POINTS
from tests.support.gateway import OWNER, GatewayRig, gateway_stack
from tests.support.mattermost.fake import FakeMattermost
from tests.support.procs import wait_for
from tests.support.serve import BOUND_S, REPLY_BOUND_S

EXAMPLES = int(os.environ.get("BOXMAKER_GATEWAY_EXAMPLES", "3"))

ACTIONS = st.one_of(
    st.tuples(st.just("post"), st.sampled_from(["short", "long"])),
    st.tuples(st.just("refused"), st.sampled_from(["other", "webhook", "bot", "system"])),
    st.tuples(st.just("drop"), st.booleans()),  # True: lossy (the server forgot us)
    st.tuples(st.just("lose"), st.integers(1, 2)),
    st.tuples(st.just("crash"), st.sampled_from([*POINTS, "now"])),
    st.tuples(st.just("loopd"), st.just("restart")),
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.generate],  # a shrink would rerun real processes for minutes
)
@given(st.lists(ACTIONS, min_size=2, max_size=6))
def test_every_allowed_post_is_answered_exactly_once_whatever_the_faults(
    actions: list[tuple[str, Any]],
) -> None:
    with gateway_stack(max_post_size=700) as (_, fake, rig):
        run(rig, fake, actions)


def run(rig: GatewayRig, fake: FakeMattermost, actions: list[tuple[str, Any]]) -> None:
    env = rig.env
    dm = fake.direct_channel(OWNER)
    other = fake.add_user("mallory")
    gw = rig.start()
    first = fake.post_as(OWNER, dm, "hello")  # the channel is known from here on
    rig.wait_replies(dm, first["id"])
    allowed, refused = [first["id"]], []
    for kind, arg in actions:
        if gw.proc.poll() is not None:  # a crash point fired: restart, as supervisord would
            gw = rig.start()
        if kind == "post":
            text = "tell me more " * (60 if arg == "long" else 1)
            allowed.append(fake.post_as(OWNER, dm, text)["id"])
        elif kind == "refused":
            if arg == "other":
                p = fake.post_as(other, fake.direct_channel(other), "answer me")
            elif arg == "webhook":
                p = fake.post_as(OWNER, dm, "hook", props={"from_webhook": "true"})
            elif arg == "bot":
                p = fake.post_as(OWNER, dm, "bot", props={"from_bot": True})
            else:
                p = fake.post_as(OWNER, dm, "joined", type="system_join_channel")
            refused.append((p["channel_id"], p["id"]))
        elif kind == "drop":
            if arg:
                fake.forget_connections()
            fake.drop_after(0)
        elif kind == "lose":  # the next post after these reveals the gap (a lossy reconnect)
            fake.lose_next(arg)
            allowed += [fake.post_as(OWNER, dm, f"after gap {i}")["id"] for i in range(arg + 1)]
        elif kind == "crash":
            if arg == "now":
                gw.proc.send_signal(signal.SIGKILL)
                gw.wait(BOUND_S)
                gw = rig.start()
            else:
                rig.crash_at(arg)  # the next post that reaches the point kills it
        else:
            env.daemons[-1].stop()
            env.start()
    rig.plan.unlink(missing_ok=True)  # no crash is armed for the rest
    for post_id in allowed:
        if gw.proc.poll() is not None:
            gw = rig.start()
        wait_for(
            lambda pid=post_id: check_alive(rig) and rig.replies(dm, pid),  # type: ignore[misc]
            f"a reply to {post_id}",
            REPLY_BOUND_S,
        )
    final = fake.post_as(OWNER, dm, "last")  # its reply comes after every earlier one
    allowed.append(final["id"])
    rig.wait_replies(dm, final["id"])
    for post_id in allowed:
        replies = rig.replies(dm, post_id)
        parts = sorted(str(r["props"]["boxmaker_part"]) for r in replies)
        n = len(parts)
        assert parts == sorted(f"{i}/{n}" for i in range(1, n + 1)), f"{post_id}: {parts}"
    for channel, post_id in refused:
        assert rig.replies(channel, post_id) == [], f"refused post {post_id} was answered"


def check_alive(rig: GatewayRig) -> bool:
    """Restarts gatewayd if an armed crash point fired while the replies came."""
    if rig.daemons[-1].proc.poll() is not None:
        rig.start()
    return True
