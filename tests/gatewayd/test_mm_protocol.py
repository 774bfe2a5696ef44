"""The Mattermost client's cores on the fixtures: shapes parsed, seq and resume rules, 429 waits."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.gatewayd.mattermost.protocol import SocketState, backoff_ms, retry_wait_s
from boxmaker.gatewayd.mattermost.types import (
    Connected,
    MattermostError,
    Me,
    Post,
    Posted,
    parse_event,
    post_list,
    posted_from,
    redact,
)
from tests.support.mattermost.fixtures import http_message, load, text


def _hello(cid: str, seq: int = 0) -> str:
    d = load("ws/hello.with_connection_id.constructed.json")
    d["data"]["connection_id"] = cid
    d["seq"] = seq
    return json.dumps(d)


def _posted(seq: int, post_id: str = "p1") -> str:
    d = load("ws/posted.channel.captured.json")
    post = json.loads(d["data"]["post"])
    post["id"] = post_id
    d["data"]["post"] = json.dumps(post)
    d["seq"] = seq
    return json.dumps(d, separators=(", ", ": "))


def test_the_dm_wire_capture_parses_with_its_spaces_and_string_post() -> None:
    event = parse_event(text("ws/posted.dm.wire.captured.txt"))
    assert event is not None
    assert (event.event, event.seq) == ("posted", 35)
    posted = posted_from(event)
    assert posted.channel_type == "D"
    assert posted.post.message == "aweff"
    assert posted.post.channel_id == "4ckrmjaeeb8mbpodbmo6bknpge"
    assert posted.mentions == ()
    assert posted.post.file_ids == ()


def test_mentions_are_a_json_string_of_ids() -> None:
    d = load("ws/posted.channel.captured.json")
    d["data"]["mentions"] = json.dumps(["bot1", "bot2"])
    event = parse_event(json.dumps(d))
    assert event is not None
    assert posted_from(event).mentions == ("bot1", "bot2")


def test_the_post_object_and_post_list_parse() -> None:
    post = Post.from_json(load("rest/post.from_capture.json"))
    assert post.props == {"disable_group_highlight": True}
    assert post_list(load("rest/postlist.since.constructed.json")) == [post]


def test_post_list_is_oldest_first_whatever_the_order() -> None:
    base = load("rest/post.from_capture.json")
    posts = {f"p{i}": {**base, "id": f"p{i}", "create_at": 1000 + i} for i in range(3)}
    newest_first = {"order": ["p2", "p1", "p0"], "posts": posts}
    assert [p.id for p in post_list(newest_first)] == ["p0", "p1", "p2"]
    with pytest.raises(MattermostError, match="'p9' is in 'order'"):
        post_list({"order": ["p9"], "posts": posts})


@pytest.mark.parametrize(
    ("bad", "field"),
    [({"id": 3}, "'id'"), ({"create_at": "x"}, "'create_at'"), ({"props": []}, "props")],
)
def test_a_bad_post_names_its_field(bad: dict[str, object], field: str) -> None:
    with pytest.raises(MattermostError, match=field):
        Post.from_json({**load("rest/post.from_capture.json"), **bad})


def test_me_reads_is_bot() -> None:
    assert Me.from_json({"id": "u", "username": "b", "is_bot": True, "extra": 1}).is_bot
    assert not Me.from_json({"id": "u", "username": "b"}).is_bot


def test_responses_to_actions_are_not_events() -> None:
    assert parse_event(json.dumps(load("ws/response_ok.json"))) is None


def test_first_hello_is_lossy_then_events_flow() -> None:
    s = SocketState()
    assert s.url("ws://h/api/v4/websocket") == "ws://h/api/v4/websocket"
    s.opened()
    assert s.feed(_hello("c1")) == [Connected("c1", lossless=False)]
    out = s.feed(_posted(1))
    assert len(out) == 1
    assert isinstance(out[0], Posted)
    assert out[0].seq == 1
    assert s.feed(json.dumps(load("ws/typing.captured.json") | {"seq": 2})) == []
    assert s.url("ws://h/api/v4/websocket") == (
        "ws://h/api/v4/websocket?connection_id=c1&sequence_number=3"
    )


def test_a_seq_gap_is_lossy_and_the_event_still_comes() -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    out = s.feed(_posted(3))
    assert out[0] == Connected("c1", lossless=False)
    assert isinstance(out[1], Posted)
    assert s.next_seq == 4


def test_a_resume_is_lossless_on_its_first_event_in_sequence() -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    s.feed(_posted(1))
    s.opened()
    replayed = s.feed(_posted(1))  # an overlap of the replay: already seen, yet the resume held
    assert replayed == [Connected("c1", lossless=True)]
    assert [type(i) for i in s.feed(_posted(2))] == [Posted]


def test_a_resume_answered_by_a_new_hello_is_lossy() -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    s.feed(_posted(1))
    s.opened()
    assert s.feed(_hello("c2")) == [Connected("c2", lossless=False)]
    assert s.next_seq == 1


def test_a_resume_past_a_gap_is_lossy() -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    s.opened()
    out = s.feed(_posted(5))
    assert out[0] == Connected("c1", lossless=False)
    assert isinstance(out[1], Posted)


def test_a_hello_with_the_same_id_at_the_wanted_seq_is_lossless() -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    assert s.feed(_hello("c1", seq=1)) == [Connected("c1", lossless=True)]
    assert s.feed(_hello("c1", seq=0)) == [Connected("c1", lossless=False)]


def test_an_old_server_without_connection_id_never_resumes() -> None:
    s = SocketState()
    assert s.feed(json.dumps(load("ws/hello.docs.json"))) == [Connected("", lossless=False)]
    assert s.url("ws://h/x") == "ws://h/x"


def test_a_bad_frame_or_post_is_lossy_not_silent() -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    assert s.feed("{not json") == [Connected("c1", lossless=False)]
    d = load("ws/posted.channel.captured.json") | {"seq": 1}
    d["data"]["post"] = "{broken"
    assert s.feed(json.dumps(d)) == [Connected("c1", lossless=False)]


def test_the_429_fixture_headers_give_their_wait() -> None:
    status, headers, _ = http_message("rest/429_rate_limited.docs.http")
    assert status == 429
    assert retry_wait_s(headers, 1_700_000_000) == 1.0
    assert retry_wait_s({"Retry-After": "2.5", "X-RateLimit-Reset": "9"}, 0) == 2.5
    assert retry_wait_s({"X-RateLimit-Reset": "1700000004"}, 1_700_000_000) == 4.0
    assert retry_wait_s({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, 1445412480) == 10.0
    assert retry_wait_s({}, 0) is None


def test_backoff_is_full_jitter_under_the_cap() -> None:
    assert backoff_ms(0, 500, 60_000, 0.999) < 500
    assert backoff_ms(3, 500, 60_000, 0.5) == 2000
    assert backoff_ms(40, 500, 60_000, 0.999) < 60_000
    assert backoff_ms(5, 500, 60_000, 0.0) == 0


def test_redact_hides_the_token() -> None:
    assert redact("Bearer abc123 failed", "abc123") == "Bearer <token> failed"
    assert redact("x", "") == "x"


@given(
    st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans()), min_size=1, max_size=40)
)
def test_any_delivery_yields_each_post_once_and_every_loss_is_said(
    steps: list[tuple[int, bool, bool]],
) -> None:
    """The server's events 1..n delivered with skips (lost), repeats (replay overlap) and drops
    (a resume): no post is yielded twice, and a post after a skipped one comes after a lossy
    Connected."""
    s = SocketState()
    s.feed(_hello("c1"))
    seq, out = 0, []
    for advance, replay, reconnect in steps:
        if reconnect:
            s.opened()
        if replay and seq:
            out += s.feed(_posted(seq, f"p{seq}"))  # the last one again
        seq += advance  # advance > 1: advance - 1 events lost on the way
        if advance:
            out += s.feed(_posted(seq, f"p{seq}"))
    yielded = [i.seq for i in out if isinstance(i, Posted)]
    assert yielded == sorted(set(yielded))  # once each, in order
    last = 0
    for i, item in enumerate(out):
        if isinstance(item, Posted):
            if item.seq > last + 1:
                assert Connected("c1", lossless=False) in out[:i], "a gap was not said"
                assert out[i - 1] == Connected("c1", lossless=False)
            last = item.seq
    if all(a <= 1 for a, _, _ in steps):
        assert Connected("c1", lossless=False) not in out


def test_a_seq_that_goes_back_outside_a_resume_is_lossy_and_its_post_still_comes() -> None:
    """A server whose numbering restarts without a hello (a restart behind a proxy, another
    node): the post it carries is new, not a replay."""
    s = SocketState()
    s.feed(_hello("c1"))
    for seq in (1, 2, 3):
        s.feed(_posted(seq, f"p{seq}"))
    out = s.feed(_posted(1, "new"))
    assert out[0] == Connected("c1", lossless=False)
    assert isinstance(out[1], Posted)
    assert out[1].post.id == "new"
    assert s.next_seq == 2
    assert [type(i) for i in s.feed(_posted(2, "next"))] == [Posted]


def test_a_resume_overlap_is_dropped_but_not_after_the_replay_caught_up() -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    for seq in (1, 2, 3):
        s.feed(_posted(seq, f"p{seq}"))
    s.opened()
    assert s.feed(_posted(2, "p2")) == [Connected("c1", lossless=True)]
    assert s.feed(_posted(3, "p3")) == []
    assert [i.post.id for i in s.feed(_posted(4, "p4")) if isinstance(i, Posted)] == ["p4"]
    again = s.feed(_posted(2, "after"))  # past the replay: a reset, not an overlap
    assert again[0] == Connected("c1", lossless=False)


@pytest.mark.parametrize(
    "event",
    [
        {"event": "channel_viewed", "data": {"channel_id": "c"}},
        {"event": "some_plugin_event", "data": ["a", "list"]},
        {"event": "some_plugin_event", "data": "a string"},
        {"event": "reaction_added", "data": None},
        {"event": "post_deleted", "data": {"post": '{"id": "p1"}'}},
        {"event": "post_edited", "data": {"post": '{"id": "p1", "message": "edited"}'}},
        {"event": "status_change"},
    ],
)
def test_other_events_of_any_shape_only_move_the_seq(event: dict[str, object]) -> None:
    s = SocketState()
    s.feed(_hello("c1"))
    assert s.feed(json.dumps(event | {"seq": 1})) == []
    assert s.lost == 1  # the first hello only
    assert [type(i) for i in s.feed(_posted(2))] == [Posted]


def test_a_hello_without_seq_or_connection_id_then_events() -> None:
    s = SocketState()
    hello = load("ws/hello.docs.json")
    hello.pop("seq", None)
    assert s.feed(json.dumps(hello)) == [Connected("", lossless=False)]
    assert [type(i) for i in s.feed(_posted(1))] == [Posted]
    s.opened()  # no id: the next socket is a fresh connect, never a resume
    assert s.url("ws://h/x") == "ws://h/x"
