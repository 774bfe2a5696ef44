"""Approvals from the chat through real processes (M4 section 8): the fake Mattermost -> gatewayd
(as its own uid, setpriv) -> a real loopd on the scripted model -> a real brokerd whose own config
turns chat approvals on. A held call's question carries brokerd's code; the owner's `yes <code>`
in the DM runs the call; a webhook's, another user's, "always", a wrong code and a stale answer
approve nothing. With brokerd's switch off the notice says to answer on the box and no chat answer
is taken (an answer-shaped post is then a turn, as it is without gatewayd's [brokerd]
chat_socket, or with nothing held).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.brokerd.approvals import owner_says
from tests.support.brokerd.rig import Rig, loopd_and_brokerd
from tests.support.chat_client import CAN_SETUID, GATEWAYD_UID
from tests.support.gateway import GatewayRig
from tests.support.mattermost.fake import FakeMattermost
from tests.support.procs import Daemon, python_module, wait_for
from tests.support.serve import BOUND_S, REPLY_BOUND_S, START_LINE, ServeEnv, config_text
from tests.support.turn import calls, say

pytestmark = pytest.mark.skipif(not CAN_SETUID, reason="gatewayd's own uid needs root, setpriv")

OWNER = "own0000000000000000000000a"
BOT = "bot0000000000000000000000b"
MODES = (("write_file", "ask"), ("edit_file", "ask"), ("read_file", "allow"))
GRANTS = "".join(f'[[grant]]\ntool = "{tool}"\nmode = "{mode}"\n\n' for tool, mode in MODES)
WRITE = {"name": "write_file", "arguments": {"path": "a.txt", "content": "hello"}}
CODE = re.compile(r"`yes ([a-z0-9]+)`")


def chat_sock(rig: Rig) -> str:
    return str(rig.base / "run" / "chat.sock")


@pytest.fixture
def stack() -> Iterator[tuple[ServeEnv, Rig, FakeMattermost]]:
    with (
        loopd_and_brokerd(GRANTS) as (env, rig),
        FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER) as fake,
    ):
        yield env, rig, fake


def start(env: ServeEnv, rig: Rig, switch: bool = True) -> None:
    """brokerd (its switch on or off), then loopd with its tools on brokerd and gatewayd's uid
    admitted on loop.sock."""
    rig.broker = {"approval_timeout_ms": 120_000}
    if switch:
        on = {"socket": chat_sock(rig), "gatewayd_uid": GATEWAYD_UID, "tools": ["write_file"]}
        rig.broker["chat_approvals"] = {"enabled": True, **on}
    rig.start()
    os.chmod(env.folder, 0o755)  # gatewayd's uid reaches loop.sock's folder
    path = env.folder / "loopd.toml"
    path.write_text(
        config_text(env.folder, clients=[GATEWAYD_UID])
        + f'[tools]\nbroker_socket = "{rig.socket}"\nbroker_timeout_ms = 120000\n'
    )
    daemon = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(path)))
    env.daemons.append(daemon)
    daemon.wait_for_line(START_LINE, BOUND_S)
    os.chmod(env.socket.parent, 0o755)


@dataclass
class Chat:
    """brokerd and loopd started, gatewayd (its own uid) between them and the fake, the DM."""

    env: ServeEnv
    rig: Rig
    fake: FakeMattermost
    gw: GatewayRig
    dm: str

    def ask_to_write(self, *then: str) -> dict[str, Any]:
        """The owner's post whose turn calls write_file (held); the model then says `then`."""
        self.env.model.load([calls(("call_tool", WRITE)), *(say(t) for t in then)])
        return self.fake.post_as(OWNER, self.dm, "write hello to a.txt")

    def notice(self) -> str:
        """The approval notice the bot posted in the DM."""
        try:
            post = wait_for(
                lambda: next((p for p in self.fake.bot_posts(self.dm)
                              if "approval needed" in str(p["message"])), None),
                "the approval notice",
                REPLY_BOUND_S,
            )  # fmt: skip
        except AssertionError as e:
            said = self.gw.daemons[-1].err_lines[-20:]
            said += [str(r)[:300] for s in self.env.home.glob("sessions/*")
                     for r in self.env.log_lines(s.name)]  # fmt: skip
            posts = self.fake.bot_posts(self.dm)
            raise AssertionError(f"{e}; gatewayd said {said}; posts {posts}") from None
        return str(post["message"])

    def reply(self, post: dict[str, Any]) -> str:
        return str(self.gw.wait_replies(self.dm, post["id"])[0]["message"])

    def no_on_the_box(self) -> None:
        """The owner answers the held call `no` on owner.sock."""
        held = wait_for(lambda: pending(self.rig), "the held call", BOUND_S)
        assert owner_says(self.rig, held, "no").kind == "answered"

    def assert_brokerd_took_no_chat_answer(self) -> None:
        assert self.rig.daemon is not None
        assert not any("chat answer" in ln for ln in self.rig.daemon.lines)


@contextmanager
def chat(
    stack: tuple[ServeEnv, Rig, FakeMattermost], switch: bool = True, socket: bool = True
) -> Iterator[Chat]:
    """`start` (brokerd's switch on or off), then gatewayd, [brokerd] chat_socket set or not."""
    env, rig, fake = stack
    start(env, rig, switch)
    brokerd = {"chat_socket": chat_sock(rig)} if socket else None
    gw = GatewayRig(env, fake, uid=GATEWAYD_UID, brokerd=brokerd)
    try:
        gw.start()
        yield Chat(env, rig, fake, gw, fake.direct_channel(OWNER))
    finally:
        gw.stop()


def pending(rig: Rig) -> str | None:
    conn = rig.owner()
    with conn.sock:
        conn.send("pending", {}, True)
        got = conn.recv()
    assert got is not None
    return str(got.body["calls"][0]["id"]) if got.body["calls"] else None


def approval_lines(rig: Rig) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in rig.log.read_bytes().splitlines()]
    return [r for r in lines if r["type"] == "approval"]


def test_the_owners_yes_in_the_dm_runs_the_call_and_the_answer_is_posted_once(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    with chat(stack) as c:
        env, rig, fake, gw, dm = c.env, c.rig, c.fake, c.gw, c.dm
        post = c.ask_to_write("written")
        question = c.notice()
        assert "write a.txt: 5 bytes (a new file)\nhello" in question  # brokerd's whole view
        code = CODE.search(question)
        assert code is not None, question
        yes = fake.post_as(OWNER, dm, f"Yes {code.group(1)}")
        [taken] = gw.wait_replies(dm, yes["id"])
        assert "**yes** taken" in str(taken["message"])
        [answer] = gw.wait_replies(dm, post["id"])
        assert answer["message"] == "written"
        assert (rig.workspace / "a.txt").read_text() == "hello"
        [approval] = approval_lines(rig)
        assert (approval["answer"], approval["post_id"], approval["user_id"]) == (
            "yes", yes["id"], OWNER)  # fmt: skip
        env.model.load([say("later")])
        later = fake.post_as(OWNER, dm, "thanks")
        gw.wait_replies(dm, later["id"])
        assert len(gw.replies(dm, post["id"])) == 1
        assert len(gw.replies(dm, yes["id"])) == 1
        assert not any(r.get("client_ref") == f"mm:{yes['id']}"  # the answer was not a turn
                       for r in env.log_lines(f"mm.{dm}"))  # fmt: skip


def test_only_the_owners_own_right_answer_is_taken(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    with chat(stack) as c:
        rig, fake, gw, dm = c.rig, c.fake, c.gw, c.dm
        post = c.ask_to_write("not written")
        code = CODE.search(c.notice())
        assert code is not None
        k = code.group(1)
        mallory = fake.add_user("mallory")
        hook = fake.post_as(OWNER, dm, f"yes {k}", props={"from_webhook": "true"})
        other = fake.post_as(mallory, fake.direct_channel(mallory), f"yes {k}")
        wrong = "".join("a" if ch != "a" else "b" for ch in k)
        for text, why in [(f"always {k}", '"always" is answered on the box only'),
                          (f"yes {wrong}", "no held call has the code"),
                          (f"y {k}", "answer yes or no")]:  # fmt: skip
            sent = fake.post_as(OWNER, dm, text)
            [reply] = gw.wait_replies(dm, sent["id"])
            assert "**not taken**" in str(reply["message"])
            assert why in str(reply["message"]), reply
        assert gw.replies(dm, hook["id"]) == []  # refused before anything: no reply, no relay
        assert fake.bot_posts(fake.direct_channel(mallory)) == []
        assert rig.daemon is not None
        assert not any(hook["id"] in ln or other["id"] in ln for ln in rig.daemon.lines)
        assert not (rig.workspace / "a.txt").exists()
        no = fake.post_as(OWNER, dm, f"no {k}")
        assert "**no** taken" in c.reply(no)
        [answer] = gw.wait_replies(dm, post["id"])
        assert answer["message"] == "not written"
        stale = fake.post_as(OWNER, dm, f"yes {k}")  # the call has ended
        [reply] = gw.wait_replies(dm, stale["id"])
        assert "it was answered already (no)" in str(reply["message"])
        assert not (rig.workspace / "a.txt").exists()
        assert [a["answer"] for a in approval_lines(rig)] == ["no"]


def test_a_tool_not_on_the_list_is_answered_on_the_box(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    with chat(stack) as c:
        c.rig.workspace.mkdir(exist_ok=True)
        (c.rig.workspace / "f.txt").write_text("alpha\n")
        edit = {"name": "edit_file", "arguments": {"path": "f.txt", "old": "alpha", "new": "b"}}
        c.env.model.load([calls(("call_tool", edit)), say("edited")])
        post = c.fake.post_as(OWNER, c.dm, "edit f.txt")
        text = c.notice()
        assert "bxctl approve" in text
        assert "edit_file is not in [broker.chat_approvals] tools" in text
        assert CODE.search(text) is None  # no code to quote
        c.no_on_the_box()
        assert c.reply(post) == "edited"


def test_with_brokerds_switch_off_the_notice_says_the_box_and_an_answer_is_a_turn(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    # gatewayd names the socket; brokerd did not turn it on
    with chat(stack, switch=False) as c:
        assert not Path(chat_sock(c.rig)).exists()
        post = c.ask_to_write("not written", "a turn")
        text = c.notice()
        assert "Answer on the box: `bxctl approve`" in text
        assert CODE.search(text) is None
        sent = c.fake.post_as(OWNER, c.dm, "yes abcdef")  # queued behind the held turn
        c.no_on_the_box()
        assert c.reply(post) == "not written"
        assert c.reply(sent) == "a turn"
        assert not (c.rig.workspace / "a.txt").exists()
        c.assert_brokerd_took_no_chat_answer()


@pytest.mark.parametrize("socket", [False, True])
def test_an_answer_shaped_post_is_a_turn_without_chat_socket_or_a_held_call(
    stack: tuple[ServeEnv, Rig, FakeMattermost], socket: bool
) -> None:
    with chat(stack, socket=socket) as c:
        c.env.model.load([say("a turn")])
        sent = c.fake.post_as(OWNER, c.dm, "no thanks")  # the shape, with nothing held
        assert c.reply(sent) == "a turn"
        c.assert_brokerd_took_no_chat_answer()
