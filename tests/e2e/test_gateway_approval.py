"""One approval through the whole gateway stack (issue 36 item 8), as `make run` starts it
(scripts/run.sh, supervisord, conf/programs/brokerd.conf and gatewayd.conf): the fake Mattermost
-> gatewayd -> loopd -> brokerd, with inferproxy in front of the model. A DM's turn calls
write_file, which the starter grants ask about; the owner is told in Mattermost (notify, the
default: brokerd's chat switch is off) and answers with `bxctl approve <id> --yes` on the box;
the call runs and the turn's answer is posted once.

The model is the scripted server (tests/support/serve.py, on TCP behind `make run UPSTREAM=`), not
SmolLM2: the local profile's SmolLM2-135M never starts a tool call on its own (conf/loopd.local.toml
[selftest]: only a prefilled `<tool_call>` with tool_choice "required" gets one), so a turn of it
cannot be made to meet a held call. The plain turns through the real model are
tests/e2e/test_gateway_stack.py's. The chat answer (brokerd's switch on) needs gatewayd on a uid
of its own, which one `make run` as one user cannot give:
tests/brokerd/approvals/test_chat_gateway.py runs it with real uids.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker._client.owner import OwnerClient
from tests.support.fakeserver import FakeServer
from tests.support.gateway import BOT, OWNER, write_gateway_config
from tests.support.mattermost.fake import FakeMattermost
from tests.support.procs import short_tmpdir, wait_for
from tests.support.replies import json_reply
from tests.support.run_stack import BOUND, LOOPD_BOUND, run_stack
from tests.support.serve import ServeEnv
from tests.support.turn import calls, say

REPLY_TO = "boxmaker_reply_to"
WRITE = {"name": "write_file", "arguments": {"path": "a.txt", "content": "hello"}}


@pytest.fixture
def run() -> Iterator[tuple[Path, dict[str, str], FakeMattermost, ServeEnv]]:
    folder = short_tmpdir("bx-ga-")
    with (
        FakeServer(("127.0.0.1", 0)) as server,
        FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER) as fake,
    ):
        model = ServeEnv(folder, server)
        server.on("GET", "/health", json_reply(200, {"status": "ok"}))  # make run waits on it
        host, port = server.address  # type: ignore[misc]
        loopd = model.write_config(spare_worker=False)
        with loopd.open("a") as f:  # the tools on make run's brokerd
            f.write(f'\n[tools]\nbroker_socket = "{folder / "broker.sock"}"\n')
        gateway = write_gateway_config(folder, fake, model.socket, folder / "gateway")
        settings = {"UPSTREAM": f"{host}:{port}", "CONFIG": str(loopd), "GATEWAY": str(gateway)}
        logs = ("gatewayd.err.log", "loopd.err.log", "brokerd.log", "supervisord.log")
        try:
            with run_stack(logs, run=folder, settings=lambda _: settings) as rs:
                started = rs.started
                assert started.returncode == 0, started.stdout + started.stderr
                yield folder, rs.env, fake, model
        finally:
            model.model.release()


def replies(fake: FakeMattermost, channel: str, post_id: str) -> list[dict[str, Any]]:
    return [p for p in fake.bot_posts(channel) if (p.get("props") or {}).get(REPLY_TO) == post_id]


def notices(fake: FakeMattermost, channel: str) -> list[dict[str, Any]]:
    return [p for p in fake.bot_posts(channel) if "approval needed" in str(p["message"])]


def test_a_held_call_is_told_in_the_chat_answered_on_the_box_runs_and_is_answered_once(
    run: tuple[Path, dict[str, str], FakeMattermost, ServeEnv],
) -> None:
    folder, env, fake, model = run
    log = folder / "gatewayd.err.log"
    wait_for(lambda: log.exists() and "socket connected" in log.read_text(), "gatewayd", BOUND)
    dm = fake.direct_channel(OWNER)
    model.model.load([calls(("call_tool", WRITE)), say("written")])
    post = fake.post_as(OWNER, dm, "write hello to a.txt")
    [notice] = wait_for(lambda: notices(fake, dm), "the approval notice", LOOPD_BOUND)
    assert "`write_file`" in str(notice["message"])
    assert "bxctl approve" in str(notice["message"])
    with OwnerClient(folder / "owner.sock") as owner:
        [held] = owner.pending()
    assert held.tool == "write_file"
    approved = subprocess.run(
        [str(Path(sys.executable).parent / "bxctl"), "approve", held.id, "--yes",
         "--owner-socket", str(folder / "owner.sock")],
        env=env, capture_output=True, text=True, timeout=BOUND, check=False,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    [answer] = wait_for(lambda: replies(fake, dm, post["id"]), "the turn's answer", LOOPD_BOUND)
    assert answer["message"] == "written"
    assert (folder / "workspace" / "a.txt").read_text() == "hello"
    decisions = [
        orjson.loads(line)
        for line in (folder / "broker" / "decisions.jsonl").read_bytes().splitlines()
    ]
    [approval] = [r for r in decisions if r["type"] == "approval"]
    assert (approval["answer"], approval["mode"]) == ("yes", "allow")
    assert "post_id" not in approval  # answered on the box, not from the chat
    model.model.load([say("later")])
    later = fake.post_as(OWNER, dm, "thanks")
    wait_for(lambda: replies(fake, dm, later["id"]), "the next answer", LOOPD_BOUND)
    assert len(replies(fake, dm, post["id"])) == 1
    assert len(notices(fake, dm)) == 1
    assert fake.token not in log.read_text()
