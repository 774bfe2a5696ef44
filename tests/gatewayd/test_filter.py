"""Who may talk (M4 section 4): every refused shape and its variants, from the fixtures' posts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from boxmaker.gatewayd.mattermost.types import Post
from boxmaker.gatewayd.who import Rules, mentions_bot, refused, truthy
from tests.support.mattermost.fixtures import load

OWNER = "t1pn9rb63fnpjrqibgriijcx4r"
BOT = "xei6dqz8xfgm7kqzddjziyofyo"
OTHER = "cmr7sncacib4xfhd6yo3n4tf5e"
LISTED = "1waumyyd6jyczrxntuiopybygy"
UNLISTED = "9zzzzzzzzzzzzzzzzzzzzzzzzz"
DM = "4ckrmjaeeb8mbpodbmo6bknpge"
RULES = Rules(BOT, "boxbot", frozenset({OWNER}), frozenset({LISTED}))


def base(**changes: Any) -> Post:
    post = Post.from_json(load("rest/post.from_capture.json"))
    return replace(post, **{"user_id": OWNER, "channel_id": DM, **changes})


def allowed(post: Post, channel_type: str = "D", mentions: tuple[str, ...] = ()) -> bool:
    return refused(post, channel_type, mentions, RULES) is None


def test_the_owner_in_a_dm_and_in_a_listed_channel_with_a_mention_may_talk() -> None:
    assert allowed(base())
    assert allowed(base(channel_id=LISTED), "O", (BOT,))
    assert allowed(base(channel_id=LISTED, message="hey @boxbot, what time?"), "P")
    assert allowed(base(channel_id=LISTED, message="@BoxBot hi"), "O")
    assert allowed(base(props={"from_webhook": "false", "from_bot": False}))


@pytest.mark.parametrize("user", [OTHER, BOT, "", OWNER.upper(), OWNER + " "])
def test_another_user_and_the_bot_itself_are_refused(user: str) -> None:
    assert not allowed(base(user_id=user))
    assert not allowed(base(user_id=user, channel_id=LISTED), "O", (BOT,))


@pytest.mark.parametrize(
    "kind", ["system_join_channel", "system_header_change", "custom_plugin", " "]
)
def test_a_system_type_is_refused(kind: str) -> None:
    assert not allowed(base(type=kind))


@pytest.mark.parametrize("key", ["from_webhook", "from_bot", "from_plugin", "from_oauth_app"])
@pytest.mark.parametrize("value", ["true", True, "True", " TRUE ", "1", 1, "yes", {"x": 1}])
def test_a_post_from_a_webhook_bot_plugin_or_app_is_refused_in_any_spelling(
    key: str, value: object
) -> None:
    assert not allowed(base(props={key: value}))
    assert not allowed(base(props={key: value}, channel_id=LISTED), "O", (BOT,))


@pytest.mark.parametrize("value", ["false", False, "", "0", 0, None, "no", "off"])
def test_a_false_prop_refuses_nothing(value: object) -> None:
    assert truthy(value) is False
    assert allowed(base(props={"from_webhook": value}))


@pytest.mark.parametrize("channel_type", ["O", "P", "G", ""])
def test_an_unlisted_channel_is_refused_even_with_a_mention(channel_type: str) -> None:
    post = base(channel_id=UNLISTED, message="@boxbot hi")
    assert not allowed(post, channel_type, (BOT,))


@pytest.mark.parametrize(
    "message", ["hi", "boxbot hi", "@boxbot2 hi", "mail me@boxbot.org", "@box hi", "@boxbot_x"]
)
def test_a_listed_channel_without_a_mention_is_refused(message: str) -> None:
    assert not allowed(base(channel_id=LISTED, message=message), "O", (OTHER,))


def test_a_group_message_is_not_a_dm() -> None:
    assert not allowed(base(channel_id=UNLISTED), "G", (BOT,))


def test_the_reason_never_holds_the_text() -> None:
    secret = "my very private words"
    for post, ct in [
        (base(user_id=OTHER, message=secret), "D"),
        (base(type="system_x", message=secret), "D"),
        (base(props={"from_bot": "true"}, message=secret), "D"),
        (base(channel_id=LISTED, message=secret), "O"),
    ]:
        why = refused(post, ct, (), RULES)
        assert why is not None
        assert secret not in why


def test_mentions_from_the_event_or_the_text() -> None:
    assert mentions_bot(base(message="nothing"), (BOT,), RULES)
    assert mentions_bot(base(message="(@boxbot)"), (), RULES)
    assert not mentions_bot(base(message="@boxbots"), (), RULES)
