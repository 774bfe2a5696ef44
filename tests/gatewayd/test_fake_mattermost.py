"""The fake Mattermost server pinned to ../shared/mattermost/: it emits and accepts their shapes.

Read with a plain websockets client and httpx, not gatewayd's client, so what is checked is the
fake's wire text itself: the same key sets and value types as the fixtures, JSON-string fields,
spaces after the top-level colons, the 429 headers, the resume rules of ws/reconnect.constructed.
COVERED names the test of each fixture; a fixture added to shared/ and not named here fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.support.mattermost.fake import KEEP_AWAY, FakeMattermost
from tests.support.mattermost.fixtures import fixture_files, http_message, load, text

NOT_SERVED = "not served: "
COVERED = {
    "interactive/action_callback.request.constructed.json": NOT_SERVED
    + "the server calls a listener on the box with it; gatewayd has none (brief section 2)",
    "interactive/action_callback.response.constructed.json": NOT_SERVED + "the same callback",
    "rest/429_rate_limited.docs.http": "test_429_has_the_fixture_headers",
    "rest/create_post.request.json": "test_create_post_accepts_the_fixture_body_once",
    "rest/error_body.docs.json": "test_errors_have_the_fixture_body",
    "rest/login_200_headers.docs.http": "test_answers_carry_the_fixture_headers",
    "rest/patch_post.request.json": "test_patch_and_its_post_edited",
    "rest/post.from_capture.json": "test_post_objects_have_the_captured_keys",
    "rest/postlist.since.constructed.json": "test_after_pages_forward_as_a_post_list",
    "rest/save_reaction.request.json": "test_reactions_and_their_events",
    "rest/typing.request.json": "test_typing_accepts_the_fixture_body",
    "ws/auth_challenge.request.json": "test_the_authentication_challenge",
    "ws/auth_ok.response.json": "test_the_authentication_challenge",
    "ws/hello.docs.json": "test_hello_has_the_constructed_shape",
    "ws/hello.with_connection_id.constructed.json": "test_hello_has_the_constructed_shape",
    "ws/post_deleted.captured.json": "test_post_deleted",
    "ws/post_edited.captured.json": "test_patch_and_its_post_edited",
    "ws/posted.channel.captured.json": "test_posted_has_the_captured_shape",
    "ws/posted.dm.wire.captured.txt": "test_posted_has_the_captured_shape",
    "ws/reaction_added.captured.json": "test_reactions_and_their_events",
    "ws/reaction_removed.captured.json": "test_reactions_and_their_events",
    "ws/reconnect.constructed.txt": "test_resume_replays_or_says_hello_again",
    "ws/response_fail.json": "test_a_wrong_challenge_token_fails",
    "ws/response_ok.json": "test_user_typing_action_is_answered",
    "ws/status_change.online.captured.json": "test_status_change_and_typing_events",
    "ws/typing.captured.json": "test_status_change_and_typing_events",
    "ws/user_typing.request.json": "test_user_typing_action_is_answered",
}

DM_POST = json.loads(json.loads(text("ws/posted.dm.wire.captured.txt"))["data"]["post"])


def test_every_fixture_is_covered() -> None:
    files = fixture_files()
    assert files, "no fixtures found"
    assert sorted(set(files) - COVERED.keys()) == [], "a fixture no test pins the fake to"
    assert sorted(COVERED.keys() - set(files)) == [], "a fixture named here is gone"
    names = {v for v in COVERED.values() if not v.startswith(NOT_SERVED)}
    assert sorted(n for n in names if n not in globals()) == []


@pytest.fixture
def mm() -> Iterator[FakeMattermost]:
    with FakeMattermost() as fake:
        yield fake


def _http(mm: FakeMattermost, token: str | None = None) -> httpx.Client:
    auth = {"Authorization": f"Bearer {mm.token if token is None else token}"}
    return httpx.Client(base_url=mm.url + "/api/v4", headers=auth, timeout=10)


def _ws(mm: FakeMattermost, query: str = "", auth: bool = True) -> ClientConnection:
    url = mm.url.replace("http://", "ws://") + "/api/v4/websocket" + query
    headers = {"Authorization": f"Bearer {mm.token}"} if auth else None
    return connect(url, additional_headers=headers, open_timeout=10)


def _recv(ws: ClientConnection) -> str:
    frame = ws.recv(timeout=10)
    assert isinstance(frame, str)
    return frame


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, int | float) else type(value).__name__


def _same_shape(ours: Any, theirs: Any, where: str = "") -> None:
    """Same keys (objects) and JSON types, recursively; a fixture's null or {} fixes no shape."""
    if isinstance(theirs, dict) and theirs:
        assert isinstance(ours, dict), where
        assert sorted(ours) == sorted(theirs), where
        for k in theirs:
            _same_shape(ours[k], theirs[k], f"{where}.{k}")
    elif theirs is not None:
        assert _kind(ours) == _kind(theirs), f"{where}: {_kind(ours)} vs {_kind(theirs)}"


def _post_keys_match(post: dict[str, Any]) -> None:
    """A post as the 2025 wire capture has it; the 2023 REST capture's keys bar its parent_id."""
    assert sorted(post) == sorted(DM_POST)
    for k, v in DM_POST.items():
        if v is not None and k not in ("props", "metadata"):
            assert _kind(post[k]) == _kind(v), k
    rest = load("rest/post.from_capture.json")
    assert set(rest) - {"parent_id"} <= set(post)  # parent_id: gone from later servers


def test_hello_has_the_constructed_shape(mm: FakeMattermost) -> None:
    with _ws(mm) as ws:
        raw = _recv(ws)
    hello = json.loads(raw)
    _same_shape(hello, load("ws/hello.with_connection_id.constructed.json"))
    assert hello["seq"] == 0
    assert len(hello["data"]["connection_id"]) == 26
    assert hello["broadcast"]["user_id"] == mm.bot["id"]
    old = load("ws/hello.docs.json")  # a 3.6 server's hello: a subset of today's
    assert set(old) == set(hello)
    assert set(old["data"]) <= set(hello["data"])
    assert set(old["broadcast"]) <= set(hello["broadcast"])
    assert raw.startswith('{"event": "hello", "data": {')


def test_posted_has_the_captured_shape(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    with _ws(mm) as ws:
        _recv(ws)
        mm.post_as(mm.owner["id"], dm, "x < y & @boxbot")
        raw = _recv(ws)
    wire = text("ws/posted.dm.wire.captured.txt").strip()
    # the top level as precomputedJSONBuf writes it: a space after each colon, this key order
    for frame in (wire, raw):
        assert frame.startswith('{"event": "posted", "data": {')
        assert '}, "broadcast": {' in frame
    assert raw.endswith(f', "seq": {json.loads(raw)["seq"]}}}')
    assert "\\u003c" in raw  # Go's encoder escapes HTML characters
    assert "\\u0026" in raw
    event, captured = json.loads(raw), json.loads(wire)
    assert sorted(event) == sorted(captured)
    assert isinstance(event["data"]["post"], str)
    assert isinstance(event["data"]["mentions"], str)  # a JSON string, as data.post
    assert json.loads(event["data"]["mentions"]) == [mm.bot["id"]]
    data = {k: v for k, v in event["data"].items() if k != "mentions"}
    _same_shape(data, {k: v for k, v in captured["data"].items() if k != "post"} | {"post": ""})
    _same_shape(event["broadcast"], captured["broadcast"])
    channel = load("ws/posted.channel.captured.json")
    assert set(channel["data"]) <= set(event["data"])
    assert set(channel["broadcast"]) <= set(event["broadcast"])
    post = json.loads(event["data"]["post"])
    _post_keys_match(post)
    assert post["message"] == "x < y & @boxbot"
    assert event["data"]["channel_type"] == "D"


def test_a_dm_without_mention_has_the_dm_captures_keys_exactly(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    with _ws(mm) as ws:
        _recv(ws)
        mm.post_as(mm.owner["id"], dm, "hello")
        event = json.loads(_recv(ws))
    captured = json.loads(text("ws/posted.dm.wire.captured.txt"))
    assert sorted(event["data"]) == sorted(captured["data"])
    assert event["data"]["channel_display_name"] == f"@{mm.owner['username']}"


def test_a_channel_post_without_mention_has_no_mentions_key(mm: FakeMattermost) -> None:
    town = mm.open_channel("town")
    with _ws(mm) as ws:
        _recv(ws)
        mm.post_as(mm.owner["id"], town, "no one named")
        event = json.loads(_recv(ws))
    assert "mentions" not in event["data"]
    assert event["data"]["channel_type"] == "O"


def test_post_objects_have_the_captured_keys(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    stored = mm.post_as(mm.owner["id"], dm, "hi")
    with _http(mm) as http:
        post = http.get(f"/posts/{stored['id']}").json()
    _post_keys_match(post)
    assert post == stored


def test_create_post_accepts_the_fixture_body_once(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    root = mm.post_as(mm.owner["id"], dm, "question")
    body = load("rest/create_post.request.json") | {"channel_id": dm, "root_id": root["id"]}
    with _http(mm) as http:
        first = http.post("/posts", json=body)
        again = http.post("/posts", json=body)
        other = http.post("/posts", json=body | {"pending_post_id": "another"})
        reply_to_reply = http.post("/posts", json=body | {"root_id": first.json()["id"]})
    assert first.status_code == again.status_code == 201
    _post_keys_match(first.json())
    assert again.json()["id"] == first.json()["id"]  # pending_post_id: created once
    assert other.json()["id"] != first.json()["id"]
    assert reply_to_reply.status_code == 400  # root_id must be the thread's root
    assert [p["message"] for p in mm.bot_posts(dm)] == ["the answer", "the answer"]


def test_after_pages_forward_as_a_post_list(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    posts = [mm.post_as(mm.owner["id"], dm, f"m{i}") for i in range(5)]
    with _http(mm) as http:
        page = http.get(f"/channels/{dm}/posts", params={"after": posts[0]["id"], "per_page": 2})
        last = http.get(f"/channels/{dm}/posts", params={"after": posts[2]["id"], "per_page": 2})
        newest = http.get(f"/channels/{dm}/posts", params={"per_page": 2})
    fixture = load("rest/postlist.since.constructed.json")
    body = page.json()
    assert sorted(body) == sorted(fixture)
    _post_keys_match(next(iter(body["posts"].values())))
    assert body["order"] == [posts[2]["id"], posts[1]["id"]]  # newest first, as the server
    assert body["next_post_id"] == posts[3]["id"]
    assert last.json()["order"] == [posts[4]["id"], posts[3]["id"]]
    assert last.json()["next_post_id"] == ""
    assert newest.json()["order"] == [posts[4]["id"], posts[3]["id"]]


def test_typing_accepts_the_fixture_body(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    with _http(mm) as http:
        r = http.post(
            "/users/me/typing", json=load("rest/typing.request.json") | {"channel_id": dm}
        )
    assert r.status_code == 200
    assert mm.typing == [{"channel_id": dm, "parent_id": ""}]


def test_status_change_and_typing_events(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    with _ws(mm) as ws, _http(mm) as http:
        _recv(ws)
        mm.set_status(mm.owner["id"], "online")
        status = json.loads(_recv(ws))
        http.post("/users/me/typing", json={"channel_id": dm, "parent_id": ""})
        typing = json.loads(_recv(ws))
    for ours, name in ((status, "status_change.online"), (typing, "typing")):
        captured = load(f"ws/{name}.captured.json")
        assert sorted(ours) == sorted(captured)
        _same_shape(ours["data"], captured["data"])
        assert set(captured["broadcast"]) <= set(ours["broadcast"])
    assert typing["broadcast"]["omit_users"] == {mm.bot["id"]: True}


def test_patch_and_its_post_edited(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    post = mm.post_as(mm.bot["id"], dm, "first")
    with _ws(mm) as ws, _http(mm) as http:
        _recv(ws)
        r = http.put(f"/posts/{post['id']}/patch", json=load("rest/patch_post.request.json"))
        edited = json.loads(_recv(ws))
    assert r.json()["message"] == "the answer, so far..."
    captured = load("ws/post_edited.captured.json")
    assert sorted(edited) == sorted(captured)
    assert sorted(edited["data"]) == sorted(captured["data"])
    _post_keys_match(json.loads(edited["data"]["post"]))


def test_post_deleted(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    post = mm.post_as(mm.owner["id"], dm, "oops")
    with _ws(mm) as ws:
        _recv(ws)
        mm.delete_post(post["id"])
        deleted = json.loads(_recv(ws))
    captured = load("ws/post_deleted.captured.json")
    assert sorted(deleted) == sorted(captured)
    assert isinstance(deleted["data"]["post"], str)
    assert json.loads(deleted["data"]["post"])["delete_at"] > 0


def test_reactions_and_their_events(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    post = mm.post_as(mm.owner["id"], dm, "hi")
    body = load("rest/save_reaction.request.json") | {
        "user_id": mm.bot["id"],
        "post_id": post["id"],
    }
    with _ws(mm) as ws, _http(mm) as http:
        _recv(ws)
        assert http.post("/reactions", json=body).status_code == 200
        added = json.loads(_recv(ws))
        http.delete(f"/users/{mm.bot['id']}/posts/{post['id']}/reactions/eyes")
        removed = json.loads(_recv(ws))
    for ours, name in ((added, "reaction_added"), (removed, "reaction_removed")):
        captured = load(f"ws/{name}.captured.json")
        assert sorted(ours) == sorted(captured)
        assert isinstance(ours["data"]["reaction"], str)  # a JSON string too
        _same_shape(json.loads(ours["data"]["reaction"]), json.loads(captured["data"]["reaction"]))


def test_errors_have_the_fixture_body(mm: FakeMattermost) -> None:
    with _http(mm) as http, _http(mm, token="wrong") as bad:
        missing = http.get("/channels/nope")
        refused = bad.get("/users/me")
    for r, status in ((missing, 404), (refused, 401)):
        assert r.status_code == status
        _same_shape(r.json(), load("rest/error_body.docs.json"))
        assert r.json()["status_code"] == status


def test_answers_carry_the_fixture_headers(mm: FakeMattermost) -> None:
    _, headers, _ = http_message("rest/login_200_headers.docs.http")
    with _http(mm) as http:
        r = http.get("/users/me")
    login_only = {"set-cookie", "token"}  # a login's own; users/me has neither
    assert set(headers) - login_only <= {k.lower() for k in r.headers}
    assert r.json()["is_bot"] is True


@pytest.mark.parametrize("reset_header", [True, False])
def test_429_has_the_fixture_headers(mm: FakeMattermost, reset_header: bool) -> None:
    status, headers, body = http_message("rest/429_rate_limited.docs.http")
    mm.rate_limit(1, retry_after=1.2, reset_header=reset_header)
    with _http(mm) as http:
        r = http.get("/users/me")
        after = http.get("/users/me")
    assert r.status_code == status
    assert r.text.strip() == body.strip()
    if reset_header:
        names = {k for k in headers if k.startswith("x-ratelimit")}
        assert names <= {k.lower() for k in r.headers}
        assert r.headers["x-ratelimit-reset"] == "2"  # whole seconds, rounded up
        assert r.headers["x-ratelimit-remaining"] == "0"
    else:
        assert r.headers["retry-after"] == "1.2"
    assert after.status_code == 200


def test_a_429_without_headers(mm: FakeMattermost) -> None:
    mm.rate_limit(1, retry_after=None, reset_header=False)
    with _http(mm) as http:
        r = http.get("/users/me")
    assert r.status_code == 429
    assert "retry-after" not in r.headers
    assert "x-ratelimit-reset" not in r.headers


def test_the_authentication_challenge(mm: FakeMattermost) -> None:
    challenge = load("ws/auth_challenge.request.json")
    challenge["data"]["token"] = mm.token
    with _ws(mm, auth=False) as ws:
        ws.send(json.dumps(challenge))
        ok = json.loads(_recv(ws))
        hello = json.loads(_recv(ws))
    assert ok == load("ws/auth_ok.response.json")
    assert hello["event"] == "hello"


def test_a_wrong_challenge_token_fails(mm: FakeMattermost) -> None:
    with _ws(mm, auth=False) as ws:
        ws.send(json.dumps(load("ws/auth_challenge.request.json")))
        fail = json.loads(_recv(ws))
    _same_shape(fail, load("ws/response_fail.json") | {"seq_reply": 1})
    assert fail["status"] == "FAIL"


def test_a_refused_token_on_the_upgrade_is_401(mm: FakeMattermost) -> None:
    mm.refuse_auth(True)
    with pytest.raises(Exception, match="401"):
        _ws(mm)


def test_user_typing_action_is_answered(mm: FakeMattermost) -> None:
    with _ws(mm) as ws:
        _recv(ws)
        ws.send(json.dumps(load("ws/user_typing.request.json")))
        assert json.loads(_recv(ws)) == load("ws/response_ok.json")


def _resume(mm: FakeMattermost, cid: str, seq: int) -> ClientConnection:
    return _ws(mm, f"?connection_id={cid}&sequence_number={seq}")


def test_resume_replays_or_says_hello_again(mm: FakeMattermost) -> None:
    """ws/reconnect.constructed.txt: replay from the queue with no hello; else a new id."""
    dm = mm.direct_channel(mm.owner["id"])
    with _ws(mm) as ws:
        cid = json.loads(_recv(ws))["data"]["connection_id"]
        mm.post_as(mm.owner["id"], dm, "one")
        assert json.loads(_recv(ws))["seq"] == 1
    mm.wait_for("the socket gone", lambda: mm.live_sockets() == 0, 10)
    mm.post_as(mm.owner["id"], dm, "two")  # while away: kept for the resume
    mm.post_as(mm.owner["id"], dm, "three")
    with _resume(mm, cid, 2) as ws:
        replayed = [json.loads(_recv(ws)) for _ in range(2)]
    assert [(e["event"], e["seq"]) for e in replayed] == [("posted", 2), ("posted", 3)]
    assert [json.loads(e["data"]["post"])["message"] for e in replayed] == ["two", "three"]
    with _resume(mm, cid, 4) as ws:  # nothing missed: silent, then the next event is seq 4
        mm.post_as(mm.owner["id"], dm, "four")
        assert json.loads(_recv(ws))["seq"] == 4
    with _resume(mm, cid, 9) as ws:  # a seq the server never sent: new id, hello
        hello = json.loads(_recv(ws))
    assert hello["event"] == "hello"
    assert hello["data"]["connection_id"] != cid
    mm.restart()
    with _resume(mm, hello["data"]["connection_id"], 1) as ws:  # unknown after a restart
        again = json.loads(_recv(ws))
    assert again["event"] == "hello"
    assert again["data"]["connection_id"] != hello["data"]["connection_id"]
    assert mm.upgrades[-1].query == {
        "connection_id": hello["data"]["connection_id"],
        "sequence_number": "1",
    }


def test_the_replay_queue_is_bounded() -> None:
    with FakeMattermost(replay_limit=3) as mm:
        dm = mm.direct_channel(mm.owner["id"])
        with _ws(mm) as ws:
            cid = json.loads(_recv(ws))["data"]["connection_id"]
        mm.wait_for("the socket gone", lambda: mm.live_sockets() == 0, 10)
        for i in range(4):
            mm.post_as(mm.owner["id"], dm, f"m{i}")
        with _resume(mm, cid, 1) as ws:  # seq 1 fell out of a queue of 3: lossy
            assert json.loads(_recv(ws))["event"] == "hello"


def test_the_pretty_style_is_the_same_event_spelled_otherwise() -> None:
    with FakeMattermost(style="pretty") as mm:
        dm = mm.direct_channel(mm.owner["id"])
        with _ws(mm) as ws:
            hello = _recv(ws)
            mm.post_as(mm.owner["id"], dm, "hi")
            raw = _recv(ws)
    assert hello.startswith('{\n  "broadcast": {')
    event = json.loads(raw)
    assert (event["event"], event["seq"]) == ("posted", 1)
    assert isinstance(event["data"]["post"], str)


def test_lose_next_leaves_a_gap(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    with _ws(mm) as ws:
        _recv(ws)
        mm.lose_next(1)
        mm.post_as(mm.owner["id"], dm, "lost")
        mm.post_as(mm.owner["id"], dm, "seen")
        assert json.loads(_recv(ws))["seq"] == 2


def test_stop_then_start_is_a_restarted_server_on_the_same_port(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    kept = mm.post_as(mm.owner["id"], dm, "kept")
    with _ws(mm) as ws:
        cid = json.loads(_recv(ws))["data"]["connection_id"]
    url = mm.url
    mm.stop()
    mm.start()
    assert mm.url == url
    with _resume(mm, cid, 1) as ws:
        hello = json.loads(_recv(ws))
    assert hello["event"] == "hello"
    assert hello["data"]["connection_id"] != cid
    assert mm.posts(dm) == [kept]


def test_connections_away_are_kept_for_a_while_not_for_ever(mm: FakeMattermost) -> None:
    first = ""
    for _ in range(KEEP_AWAY + 2):
        with _ws(mm) as ws:
            first = first or json.loads(_recv(ws))["data"]["connection_id"]
        mm.wait_for("the socket gone", lambda: mm.live_sockets() == 0, 10)
    assert first not in mm.connection_ids()
    assert len(mm.connection_ids()) == KEEP_AWAY + 1


def test_an_old_server_says_hello_as_the_docs_and_never_resumes() -> None:
    with FakeMattermost(old_server=True) as old:
        with _ws(old) as ws:
            first = json.loads(_recv(ws))
        assert set(first["data"]) == set(load("ws/hello.docs.json")["data"])
        with _ws(old, "?connection_id=x&sequence_number=1") as ws:
            again = json.loads(_recv(ws))
        assert (again["event"], again["seq"]) == ("hello", 0), "a resume is a new connection"


def test_after_a_deleted_post_pages_from_its_place(mm: FakeMattermost) -> None:
    """The server's after= compares create_at with the named post's, deleted or not."""
    dm = mm.direct_channel(mm.owner["id"])
    posts = [mm.post_as(mm.owner["id"], dm, f"m{i}") for i in range(3)]
    mm.delete_post(posts[0]["id"])
    with httpx.Client(
        base_url=mm.url + "/api/v4", headers={"Authorization": f"Bearer {mm.token}"}
    ) as http:
        page = http.get(f"/channels/{dm}/posts", params={"after": posts[0]["id"]}).json()
    assert sorted(page["order"]) == sorted(p["id"] for p in posts[1:])
