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


def gateway(env: ServeEnv, rig: Rig, fake: FakeMattermost, chat: bool = True) -> GatewayRig:
    brokerd = {"chat_socket": chat_sock(rig)} if chat else None
    gw = GatewayRig(env, fake, uid=GATEWAYD_UID, brokerd=brokerd)
    gw.start()
    return gw


def notice(gw: GatewayRig, dm: str) -> dict[str, Any]:
    """The approval notice the bot posted in the DM."""
    try:
        return wait_for(
            lambda: next((p for p in gw.fake.bot_posts(dm)
                          if "approval needed" in str(p["message"])), None),
            "the approval notice",
            REPLY_BOUND_S,
        )  # fmt: skip
    except AssertionError as e:
        said = gw.daemons[-1].err_lines[-20:]
        said += [
            str(r)[:300] for s in gw.env.home.glob("sessions/*") for r in gw.env.log_lines(s.name)
        ]
        raise AssertionError(f"{e}; gatewayd said {said}; posts {gw.fake.bot_posts(dm)}") from None


def approval_lines(rig: Rig) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in rig.log.read_bytes().splitlines()]
    return [r for r in lines if r["type"] == "approval"]


def test_the_owners_yes_in_the_dm_runs_the_call_and_the_answer_is_posted_once(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    env, rig, fake = stack
    start(env, rig)
    gw = gateway(env, rig, fake)
    try:
        dm = fake.direct_channel(OWNER)
        env.model.load([calls(("call_tool", WRITE)), say("written")])
        post = fake.post_as(OWNER, dm, "write hello to a.txt")
        question = str(notice(gw, dm)["message"])
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
    finally:
        gw.stop()


def test_only_the_owners_own_right_answer_is_taken(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    env, rig, fake = stack
    start(env, rig)
    gw = gateway(env, rig, fake)
    try:
        dm = fake.direct_channel(OWNER)
        env.model.load([calls(("call_tool", WRITE)), say("not written")])
        post = fake.post_as(OWNER, dm, "write hello to a.txt")
        code = CODE.search(str(notice(gw, dm)["message"]))
        assert code is not None
        c = code.group(1)
        mallory = fake.add_user("mallory")
        hook = fake.post_as(OWNER, dm, f"yes {c}", props={"from_webhook": "true"})
        other = fake.post_as(mallory, fake.direct_channel(mallory), f"yes {c}")
        wrong = "".join("a" if ch != "a" else "b" for ch in c)
        for text, why in [(f"always {c}", '"always" is answered on the box only'),
                          (f"yes {wrong}", "no held call has the code"),
                          (f"y {c}", "answer yes or no")]:  # fmt: skip
            sent = fake.post_as(OWNER, dm, text)
            [reply] = gw.wait_replies(dm, sent["id"])
            assert "**not taken**" in str(reply["message"])
            assert why in str(reply["message"]), reply
        assert gw.replies(dm, hook["id"]) == []  # refused before anything: no reply, no relay
        assert fake.bot_posts(fake.direct_channel(mallory)) == []
        assert rig.daemon is not None
        assert not any(hook["id"] in ln or other["id"] in ln for ln in rig.daemon.lines)
        assert not (rig.workspace / "a.txt").exists()
        no = fake.post_as(OWNER, dm, f"no {c}")
        assert "**no** taken" in str(gw.wait_replies(dm, no["id"])[0]["message"])
        [answer] = gw.wait_replies(dm, post["id"])
        assert answer["message"] == "not written"
        stale = fake.post_as(OWNER, dm, f"yes {c}")  # the call has ended
        [reply] = gw.wait_replies(dm, stale["id"])
        assert "it was answered already (no)" in str(reply["message"])
        assert not (rig.workspace / "a.txt").exists()
        assert [a["answer"] for a in approval_lines(rig)] == ["no"]
    finally:
        gw.stop()


def test_a_tool_not_on_the_list_is_answered_on_the_box(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    env, rig, fake = stack
    start(env, rig)
    rig.workspace.mkdir(exist_ok=True)
    (rig.workspace / "f.txt").write_text("alpha\n")
    gw = gateway(env, rig, fake)
    try:
        dm = fake.direct_channel(OWNER)
        edit = {"name": "edit_file", "arguments": {"path": "f.txt", "old": "alpha", "new": "b"}}
        env.model.load([calls(("call_tool", edit)), say("edited")])
        post = fake.post_as(OWNER, dm, "edit f.txt")
        text = str(notice(gw, dm)["message"])
        assert "bxctl approve" in text
        assert "edit_file is not in [broker.chat_approvals] tools" in text
        assert CODE.search(text) is None  # no code to quote
        held = wait_for(lambda: rig_pending(rig), "the held call", BOUND_S)
        assert owner_says(rig, held, "no").kind == "answered"
        assert gw.wait_replies(dm, post["id"])[0]["message"] == "edited"
    finally:
        gw.stop()


def rig_pending(rig: Rig) -> str | None:
    conn = rig.owner()
    with conn.sock:
        conn.send("pending", {}, True)
        got = conn.recv()
    assert got is not None
    return str(got.body["calls"][0]["id"]) if got.body["calls"] else None


def test_with_brokerds_switch_off_the_notice_says_the_box_and_an_answer_is_a_turn(
    stack: tuple[ServeEnv, Rig, FakeMattermost],
) -> None:
    env, rig, fake = stack
    start(env, rig, switch=False)
    assert not Path(chat_sock(rig)).exists()
    gw = gateway(env, rig, fake)  # gatewayd names the socket; brokerd did not turn it on
    try:
        dm = fake.direct_channel(OWNER)
        env.model.load([calls(("call_tool", WRITE)), say("not written"), say("a turn")])
        post = fake.post_as(OWNER, dm, "write hello to a.txt")
        text = str(notice(gw, dm)["message"])
        assert "Answer on the box: `bxctl approve`" in text
        assert CODE.search(text) is None
        sent = fake.post_as(OWNER, dm, "yes abcdef")  # queued behind the held turn
        held = wait_for(lambda: rig_pending(rig), "the call, still held", BOUND_S)
        assert owner_says(rig, held, "no").kind == "answered"
        assert gw.wait_replies(dm, post["id"])[0]["message"] == "not written"
        assert gw.wait_replies(dm, sent["id"])[0]["message"] == "a turn"
        assert not (rig.workspace / "a.txt").exists()
        assert rig.daemon is not None
        assert not any("chat answer" in ln for ln in rig.daemon.lines)
    finally:
        gw.stop()


@pytest.mark.parametrize("chat", [False, True])
def test_an_answer_shaped_post_is_a_turn_without_chat_socket_or_a_held_call(
    stack: tuple[ServeEnv, Rig, FakeMattermost], chat: bool
) -> None:
    env, rig, fake = stack
    start(env, rig)
    gw = gateway(env, rig, fake, chat=chat)
    try:
        dm = fake.direct_channel(OWNER)
        env.model.load([say("a turn")])
        sent = fake.post_as(OWNER, dm, "no thanks")  # the shape, with nothing held
        [reply] = gw.wait_replies(dm, sent["id"])
        assert reply["message"] == "a turn"
        assert rig.daemon is not None
        assert not any("chat answer" in ln for ln in rig.daemon.lines)
    finally:
        gw.stop()
