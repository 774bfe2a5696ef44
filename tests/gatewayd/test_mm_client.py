"""MattermostClient against the fake server: auth, seq, resume, dead sockets, REST retries.

Each test sets small limits and bounds its waits by them (plus scheduling slack for a busy
machine); none sleeps and hopes. The token must never show in an error, its repr or traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from boxmaker.gatewayd.mattermost import (
    ClientLimits,
    Connected,
    MattermostClient,
    MattermostError,
    Posted,
)
from tests.support.mattermost.fake import FakeMattermost
from tests.support.mattermost.wire import STYLES

T = TypeVar("T")
SLACK = 3.0  # scheduling on a busy 2-core machine, added to every bound the limits give
LIMITS = ClientLimits(  # keepalive loose enough that a busy machine drops no socket by mistake
    ping_interval_ms=1_000,
    pong_timeout_ms=2_000,
    silence_ms=10_000,
    rest_timeout_ms=4_000,
    backoff_max_ms=400,
    backoff_base_ms=100,
)
# for the tests that wait for the REST timeout to run out: half LIMITS', still 6 times the
# slow server's 0.3 s that must pass
GIVE_UP = dataclasses.replace(LIMITS, rest_timeout_ms=2_000)
QUICK = ClientLimits(  # for the dead-socket tests, which a spurious drop cannot fool
    ping_interval_ms=300,
    pong_timeout_ms=400,
    silence_ms=10_000,  # past the pong test's bound: only the pings can pass it
    rest_timeout_ms=4_000,
    backoff_max_ms=400,
    backoff_base_ms=100,
)


@pytest.fixture
def mm() -> Iterator[FakeMattermost]:
    with FakeMattermost() as fake:
        yield fake


class Run:
    """A client whose events() runs in a task, collected in `items`."""

    def __init__(self, mm: FakeMattermost, limits: ClientLimits = LIMITS) -> None:
        self.mm = mm
        self.client = MattermostClient(mm.url, mm.token, limits)
        self.items: list[Posted | Connected] = []
        self.error: BaseException | None = None
        self.task = asyncio.create_task(self._consume())

    async def _consume(self) -> None:
        try:
            async for item in self.client.events():
                self.items.append(item)
        except MattermostError as e:
            self.error = e

    async def until(self, what: str, predicate: Callable[[], bool], timeout: float) -> float:
        """Wait for predicate() with a bound; the seconds it took."""
        start = time.monotonic()
        while not predicate():
            if time.monotonic() - start > timeout:
                raise AssertionError(f"not {what} within {timeout:.1f} s; items: {self.items}")
            await asyncio.sleep(0.01)
        return time.monotonic() - start

    def connected(self) -> list[Connected]:
        return [i for i in self.items if isinstance(i, Connected)]

    def posted(self) -> list[str]:
        return [i.post.message for i in self.items if isinstance(i, Posted)]

    async def close(self) -> None:
        await self.client.close()
        # the client may be in a REST call or the socket's closing handshake when told to stop
        limits = self.client.limits
        own = (limits.rest_timeout_ms + limits.pong_timeout_ms) / 1000
        await asyncio.wait_for(self.task, own + SLACK)


def run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(body())


def reconnect_s(limits: ClientLimits = LIMITS) -> float:
    """The longest a reconnect after a drop may take: the first backoff, then an upgrade."""
    return (limits.backoff_base_ms + limits.pong_timeout_ms) / 1000 + SLACK


def test_the_token_goes_on_the_upgrade_and_every_rest_call(mm: FakeMattermost) -> None:
    async def body() -> None:
        r = Run(mm)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s())
        me = await r.client.me()
        await r.client.typing(mm.direct_channel(mm.owner["id"]))
        await r.close()
        assert me.is_bot
        assert me.id == mm.bot["id"]

    run(body)
    assert mm.upgrades
    assert mm.requests
    for req in mm.upgrades + mm.requests:
        assert req.headers["authorization"] == f"Bearer {mm.token}"
        assert mm.token not in req.path + repr(req.query)


def test_first_hello_is_lossy_and_posts_arrive_parsed(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])

    async def body() -> None:
        r = Run(mm)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s())
        mm.post_as(mm.owner["id"], dm, "hi <there> & you")
        await r.until("the post", lambda: bool(r.posted()), SLACK)
        await r.close()
        first = r.items[0]
        assert isinstance(first, Connected)
        assert not first.lossless
        post = r.items[1]
        assert isinstance(post, Posted)
        assert (post.post.message, post.channel_type, post.seq) == ("hi <there> & you", "D", 1)
        assert post.mentions == ()  # a DM names no one unless the text does

    run(body)


@pytest.mark.parametrize("style", STYLES)
def test_other_events_between_posts_keep_the_sequence(style: str) -> None:
    """typing, status_change, reactions, edits: read, dropped, and counted in the seq."""
    with FakeMattermost(style=style) as mm:
        dm = mm.direct_channel(mm.owner["id"])

        async def body() -> None:
            r = Run(mm)
            await r.until("connected", lambda: bool(r.connected()), reconnect_s())
            for i in range(3):
                mm.set_status(mm.owner["id"], "online")
                mm.emit("typing", {"parent_id": "", "user_id": mm.owner["id"]}, channel_id=dm)
                post = mm.post_as(mm.owner["id"], dm, f"m{i}")
                mm.delete_post(post["id"])
            await r.until("3 posts", lambda: len(r.posted()) == 3, SLACK)
            await r.close()
            assert r.posted() == ["m0", "m1", "m2"]
            assert len(r.connected()) == 1  # no loss said: every seq was there
            assert r.client.state.next_seq == 13

        run(body)


def test_a_seq_gap_is_a_lossy_connected(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])

    async def body() -> None:
        r = Run(mm)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s())
        mm.lose_next(1)
        mm.post_as(mm.owner["id"], dm, "lost on the wire")
        mm.post_as(mm.owner["id"], dm, "after the gap")
        await r.until("the post after the gap", lambda: bool(r.posted()), SLACK)
        await r.close()
        cid = r.connected()[0].connection_id
        assert r.items[1:] == [Connected(cid, lossless=False), r.items[2]]
        assert r.posted() == ["after the gap"]

    run(body)


def test_a_dropped_socket_resumes_losslessly(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])

    async def body() -> None:
        r = Run(mm)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s())
        mm.post_as(mm.owner["id"], dm, "one")
        await r.until("one", lambda: r.posted() == ["one"], SLACK)
        upgrades = len(mm.upgrades)
        mm.drop_after(0)
        mm.post_as(mm.owner["id"], dm, "two, while away")
        await r.until("two", lambda: len(r.posted()) == 2, reconnect_s())
        await r.close()
        cid = r.connected()[0].connection_id
        assert r.connected() == [Connected(cid, False), Connected(cid, True)]
        assert r.posted() == ["one", "two, while away"]
        resume = mm.upgrades[upgrades]
        assert resume.query == {"connection_id": cid, "sequence_number": "2"}

    run(body)


@pytest.mark.parametrize("fault", ["restart", "forget_connections"])
def test_a_server_that_cannot_resume_gives_a_new_id_and_lossy(
    mm: FakeMattermost, fault: str
) -> None:
    dm = mm.direct_channel(mm.owner["id"])

    async def body() -> None:
        r = Run(mm)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s())
        getattr(mm, fault)()
        await r.until("a new hello", lambda: len(r.connected()) == 2, reconnect_s())
        mm.post_as(mm.owner["id"], dm, "after")
        await r.until("the post", lambda: r.posted() == ["after"], SLACK)
        await r.close()
        first, second = r.connected()
        assert second.connection_id != first.connection_id
        assert not second.lossless

    run(body)


def test_a_deaf_socket_is_caught_by_the_pong_timeout(mm: FakeMattermost) -> None:
    """Deaf: no events, no pongs. Caught within ping interval + pong timeout, then resumed."""
    dm = mm.direct_channel(mm.owner["id"])
    lim = QUICK

    async def body() -> None:
        r = Run(mm, lim)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s(lim))
        upgrades = len(mm.upgrades)
        mm.go_deaf()
        mm.post_as(mm.owner["id"], dm, "said while deaf")
        bound = (lim.ping_interval_ms + lim.pong_timeout_ms + lim.backoff_base_ms) / 1000
        took = await r.until("a reconnect", lambda: len(mm.upgrades) > upgrades, bound + SLACK)
        assert r.client.last_socket_error == f"no pong within {lim.pong_timeout_ms} ms"
        assert took <= bound + SLACK
        # the upgrade is held unanswered too: the open timeout (pong_timeout) ends each try
        tries = len(mm.upgrades)
        await r.until("a retry", lambda: len(mm.upgrades) > tries, reconnect_s(lim))
        mm.wake()
        await r.until("the post", lambda: r.posted() == ["said while deaf"], reconnect_s(lim))
        await r.close()
        assert r.connected()[-1].lossless  # resumed: the queue held it

    run(body)


def test_a_silent_socket_is_caught_by_the_no_frame_timeout(mm: FakeMattermost) -> None:
    """With pings far apart, only the no-frame timeout can see the socket is dead."""
    lim = ClientLimits(
        ping_interval_ms=600_000,
        pong_timeout_ms=400,
        silence_ms=800,
        rest_timeout_ms=4_000,
        backoff_max_ms=400,
        backoff_base_ms=100,
    )

    async def body() -> None:
        r = Run(mm, lim)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s(lim))
        upgrades = len(mm.upgrades)
        mm.go_deaf()
        bound = (lim.silence_ms + lim.backoff_base_ms) / 1000
        took = await r.until("a reconnect", lambda: len(mm.upgrades) > upgrades, bound + SLACK)
        why = r.client.last_socket_error
        await r.close()
        assert why == f"no frame for {lim.silence_ms} ms"
        assert took <= bound + SLACK

    run(body)


def _no_token(mm: FakeMattermost, *things: object) -> None:
    for thing in things:
        assert mm.token not in str(thing)
        assert mm.token not in repr(thing)
        if isinstance(thing, BaseException):
            assert mm.token not in "".join(traceback.format_exception(thing))


def test_a_refused_token_is_one_clear_error_without_the_token(mm: FakeMattermost) -> None:
    mm.refuse_auth(True)

    async def body() -> None:
        r = Run(mm)
        await asyncio.wait_for(r.task, reconnect_s())
        with pytest.raises(MattermostError) as rest:
            await r.client.me()
        await r.client.close()
        assert isinstance(r.error, MattermostError)
        assert r.error.status == 401
        assert "token" in str(r.error)
        assert rest.value.status == 401
        _no_token(mm, r.error, rest.value, r.client)

    run(body)


def test_the_token_is_redacted_even_when_an_error_would_hold_it(mm: FakeMattermost) -> None:
    """A server that echoes the token in its error message still cannot make us print it."""
    dm = mm.direct_channel(mm.owner["id"])

    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        with pytest.raises(MattermostError) as e:
            await client.create_post(mm.token, "x", pending_post_id="p")  # 403: no such channel
        with pytest.raises(MattermostError) as missing:
            await client.channel_type(f"{dm}{mm.token}")
        await client.close()
        assert e.value.status == 403
        assert missing.value.status == 404
        _no_token(mm, e.value, missing.value, client)

    run(body)


@pytest.mark.parametrize(("retry_after", "reset_header"), [(0.7, False), (1.0, True)])
def test_a_429_wait_is_honoured(mm: FakeMattermost, retry_after: float, reset_header: bool) -> None:
    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        mm.rate_limit(1, retry_after=retry_after, reset_header=reset_header)
        start = time.monotonic()
        me = await client.me()
        took = time.monotonic() - start
        await client.close()
        assert me.id == mm.bot["id"]
        assert took >= retry_after  # X-RateLimit-Reset is whole seconds: 1.0 says 1
        assert took <= retry_after + LIMITS.backoff_max_ms / 1000 + SLACK

    run(body)
    assert len(mm.requests) == 2


def test_a_429_without_headers_backs_off_and_retries(mm: FakeMattermost) -> None:
    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        mm.rate_limit(3, retry_after=None, reset_header=False)
        assert (await client.me()).is_bot
        await client.close()

    run(body)
    assert len(mm.requests) == 4


def test_a_429_longer_than_the_rest_timeout_raises_at_once(mm: FakeMattermost) -> None:
    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        mm.rate_limit(1, retry_after=60, reset_header=False)
        start = time.monotonic()
        with pytest.raises(MattermostError, match="rate limited, retry in 60") as e:
            await client.me()
        await client.close()
        assert e.value.status == 429
        assert time.monotonic() - start < SLACK

    run(body)


def test_5xx_is_retried_and_4xx_is_not(mm: FakeMattermost) -> None:
    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, GIVE_UP)
        mm.fail_next(2, 503)
        assert (await client.me()).is_bot
        n = len(mm.requests)
        with pytest.raises(MattermostError, match="404") as e:
            await client.channel_type("nosuchchannel")
        assert e.value.status == 404
        assert len(mm.requests) == n + 1
        mm.fail_next(1000, 500)
        with pytest.raises(MattermostError, match="500") as gave_up:
            await client.me()
        await client.close()
        assert gave_up.value.status == 500

    run(body)
    assert [r.path for r in mm.requests[:3]] == ["/api/v4/users/me"] * 3


def test_a_slow_server_is_waited_for_within_the_rest_timeout(mm: FakeMattermost) -> None:
    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, GIVE_UP)
        mm.slow_rest(0.3)
        assert (await client.me()).is_bot
        mm.slow_rest(30)
        start = time.monotonic()
        with pytest.raises(MattermostError, match=f"within {GIVE_UP.rest_timeout_ms} ms"):
            await client.me()
        took = time.monotonic() - start
        await client.close()
        bound = GIVE_UP.rest_timeout_ms / 1000
        assert bound * 0.9 <= took <= bound + SLACK

    run(body)


def test_a_create_whose_answer_is_lost_lands_once(mm: FakeMattermost) -> None:
    """The server made the post, the answer was lost, the client retried: pending_post_id."""
    dm = mm.direct_channel(mm.owner["id"])

    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        mm.lose_answers(1)
        post = await client.create_post(dm, "the answer", pending_post_id="bot:1")
        again = await client.create_post(dm, "the answer", pending_post_id="bot:1")
        other = await client.create_post(dm, "the answer", pending_post_id="bot:2")
        await client.close()
        assert post.id == again.id
        assert other.id != post.id

    run(body)
    assert [p["pending_post_id"] for p in mm.bot_posts(dm)] == ["bot:1", "bot:2"]
    assert sum(r.path == "/api/v4/posts" for r in mm.requests) == 4


def test_replies_props_and_threads(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    root = mm.post_as(mm.owner["id"], dm, "question")

    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        reply = await client.create_post(
            dm,
            "answer",
            root_id=root["id"],
            props={"boxmaker_reply_to": root["id"]},
            pending_post_id="bot:r",
        )
        thread = await client.thread(root["id"])
        await client.close()
        assert reply.root_id == root["id"]
        assert reply.props == {"boxmaker_reply_to": root["id"]}
        assert [p.message for p in thread] == ["question", "answer"]

    run(body)


def test_posts_after_pages_forward_oldest_first(mm: FakeMattermost) -> None:
    dm = mm.direct_channel(mm.owner["id"])
    posts = [mm.post_as(mm.owner["id"], dm, f"m{i}") for i in range(7)]

    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        seen: list[str] = []
        cursor = posts[0]["id"]
        while page := await client.posts_after(dm, cursor, per_page=3):
            seen += [p.message for p in page]
            cursor = page[-1].id
        latest = await client.latest_posts(dm, per_page=2)
        await client.close()
        assert seen == [f"m{i}" for i in range(1, 7)]
        assert [p.message for p in latest] == ["m5", "m6"]

    run(body)
    pages = [r.query for r in mm.requests if r.path.endswith("/posts") and "after" in r.query]
    assert len(pages) == 3  # 3 + 3 + the empty page that ends it
    assert all("since" not in r.query for r in mm.requests)


def test_server_facts(mm: FakeMattermost) -> None:
    town = mm.open_channel("town")

    async def body() -> None:
        client = MattermostClient(mm.url, mm.token, LIMITS)
        kinds = (await client.channel_type(town), await client.max_post_chars())
        await client.typing(town, "root1")
        await client.close()
        assert kinds == ("O", 16383)

    run(body)
    assert mm.typing == [{"channel_id": town, "parent_id": "root1"}]


def test_max_post_chars_is_the_servers() -> None:
    with FakeMattermost(max_post_size=4000) as mm:

        async def body() -> int:
            client = MattermostClient(mm.url, mm.token, LIMITS)
            size = await client.max_post_chars()
            await client.close()
            return size

        assert run(body) == 4000


def test_a_bad_url_is_refused_in_one_line() -> None:
    with pytest.raises(MattermostError, match="give it as https://host"):
        MattermostClient("mattermost.example.com", "t")


def test_close_ends_events_while_reconnecting(mm: FakeMattermost) -> None:
    async def body() -> None:
        r = Run(mm, ClientLimits(backoff_base_ms=60_000, backoff_max_ms=60_000))
        await r.until("connected", lambda: bool(r.connected()), reconnect_s())
        mm.stop()  # nothing to reconnect to: the client waits in its backoff
        await asyncio.sleep(0)
        start = time.monotonic()
        await r.close()
        assert time.monotonic() - start < SLACK
        assert r.error is None

    run(body)


def test_close_during_an_upgrade_ends_events_when_the_upgrade_lands(mm: FakeMattermost) -> None:
    """close() while the upgrade is on the wire: the socket it brings is closed, not served."""
    slow = 0.5  # under LIMITS' open timeout (its pong_timeout_ms), so the upgrade succeeds

    async def body() -> None:
        r = Run(mm)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s())
        mm.slow_upgrades(slow)
        upgrades = len(mm.upgrades)
        mm.restart()  # the socket drops; the client's next upgrade waits `slow` for its answer
        await r.until("a reconnect begun", lambda: len(mm.upgrades) > upgrades, reconnect_s())
        await r.close()
        assert r.error is None
        await r.until("the late socket closed", lambda: mm.live_sockets() == 0, SLACK)
        assert len(r.connected()) == 1

    run(body)


def _mocked(handler: Callable[[httpx.Request], httpx.Response]) -> MattermostClient:
    """A client whose REST calls go to `handler` (httpx's own mock transport), not a socket."""
    client = MattermostClient("http://mm.invalid", "sekrit-token", LIMITS)
    client._http = httpx.AsyncClient(
        base_url="http://mm.invalid/api/v4", transport=httpx.MockTransport(handler)
    )
    return client


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (
            httpx.Response(200, text="<html>a proxy's page</html>"),
            "200 with a body that is not JSON",
        ),
        (httpx.Response(302, headers={"Location": "https://x/"}), "give the server's final url"),
    ],
)
def test_an_answer_that_is_not_the_api_is_one_clear_error(
    answer: httpx.Response, says: str
) -> None:
    async def body() -> None:
        client = _mocked(lambda _: answer)
        with pytest.raises(MattermostError, match=says):
            await client.me()
        await client.close()

    run(body)


def test_socket_failures_are_counted_and_redacted(mm: FakeMattermost) -> None:
    async def body() -> None:
        r = Run(mm, QUICK)
        await r.until("connected", lambda: bool(r.connected()), reconnect_s(QUICK))
        mm.go_deaf()
        bound = (QUICK.ping_interval_ms + QUICK.pong_timeout_ms) / 1000 + SLACK
        await r.until("a failure noted", lambda: r.client.socket_failures > 0, bound)
        first = r.client.last_socket_error  # read now: the held upgrades fail next
        mm.wake()
        await r.close()
        assert first == f"no pong within {QUICK.pong_timeout_ms} ms"

    run(body)


@pytest.mark.parametrize(
    ("url", "ws"),
    [
        ("https://chat.example.com", "wss://chat.example.com/api/v4/websocket"),
        ("https://chat.example.com/mm/", "wss://chat.example.com/mm/api/v4/websocket"),
        ("http://127.0.0.1:8065", "ws://127.0.0.1:8065/api/v4/websocket"),
    ],
)
def test_the_socket_url_follows_the_server_url(url: str, ws: str) -> None:
    client = MattermostClient(url, "t")
    assert client.state.url(client._ws_url) == ws
    assert str(client._http.base_url) == url.rstrip("/") + "/api/v4/"
