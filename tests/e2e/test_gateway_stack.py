"""The whole stack with the gateway, as `make run GATEWAY=...` starts it (issue 36 item 8): the
fake Mattermost -> gatewayd (under supervisord, from conf/programs/gatewayd.conf) -> loopd ->
inferproxy -> the real llama-server (SmolLM2). A DM is answered once by the model; a webhook post
with the owner's id is not; `supervisorctl restart gatewayd` answers nothing twice."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import BOT, OWNER, write_gateway_config
from tests.support.mattermost.fake import FakeMattermost
from tests.support.procs import wait_for, wait_for_socket
from tests.support.run_stack import BOUND, LOOPD_BOUND, ctl, run_stack

REPLY_TO = "boxmaker_reply_to"


@pytest.fixture
def run() -> Iterator[tuple[Path, dict[str, str], FakeMattermost]]:
    with FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER) as fake:

        def gateway(folder: Path) -> dict[str, str]:
            loop = folder / "loop.sock"
            return {"GATEWAY": str(write_gateway_config(folder, fake, loop, folder / "gateway"))}

        logs = ("gatewayd.err.log", "loopd.err.log", "supervisord.log")
        with run_stack(logs, settings=gateway) as rs:
            started, folder = rs.started, rs.run
            assert started.returncode == 0, started.stdout + started.stderr
            conf_d = sorted(p.name for p in (folder / "supervisord.d").iterdir())
            assert conf_d == ["brokerd.conf", "gatewayd.conf", "llama-server.conf"]
            wait_for_socket(str(folder / "loop.sock"), timeout=LOOPD_BOUND)
            yield folder, rs.env, fake


def replies(fake: FakeMattermost, channel: str, post_id: str) -> list[dict[str, object]]:
    return [p for p in fake.bot_posts(channel) if (p.get("props") or {}).get(REPLY_TO) == post_id]


def wait_gateway(folder: Path, starts: int) -> None:
    log = folder / "gatewayd.err.log"
    wait_for(
        lambda: log.exists() and log.read_text().count("socket connected") >= starts,
        "gatewayd's socket",
        BOUND,
    )


def test_make_run_with_a_gateway_answers_a_dm_once_through_the_real_model(
    run: tuple[Path, dict[str, str], FakeMattermost],
) -> None:
    folder, env, fake = run
    assert "gatewayd" in ctl(env, "status", "gatewayd").stdout
    wait_gateway(folder, 1)
    dm = fake.direct_channel(OWNER)
    post = fake.post_as(OWNER, dm, "Say hello in three words.")
    hook = fake.post_as(OWNER, dm, "from a hook", props={"from_webhook": "true"})
    [reply] = wait_for(lambda: replies(fake, dm, post["id"]), "the model's reply", LOOPD_BOUND)
    assert str(reply["message"]).strip()
    assert ctl(env, "restart", "gatewayd").returncode == 0
    wait_gateway(folder, 2)
    later = fake.post_as(OWNER, dm, "And now in two words.")
    wait_for(lambda: replies(fake, dm, later["id"]), "the second reply", LOOPD_BOUND)
    assert len(replies(fake, dm, post["id"])) == 1
    assert replies(fake, dm, hook["id"]) == []
    history = subprocess.run(
        [str(Path(sys.executable).parent / "bxctl"), "history", f"mm.{dm}"],
        env={**env, "BOXMAKER_HOME": str(folder / "home")},
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert "Say hello in three words." in history.stdout, history.stdout + history.stderr
    assert fake.token not in (folder / "gatewayd.err.log").read_text()
