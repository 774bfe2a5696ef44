"""The whole stack with the gateway, as `make run GATEWAY=...` starts it (issue 36 item 8): the
fake Mattermost -> gatewayd (under supervisord, from conf/programs/gatewayd.conf) -> loopd ->
inferproxy -> the real llama-server (SmolLM2). A DM is answered once by the model; a webhook post
with the owner's id is not; `supervisorctl restart gatewayd` answers nothing twice."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker._toml import toml_dumps
from boxmaker.verify.stack import free_port
from tests.support.llama import ensure_built
from tests.support.mattermost.fake import FakeMattermost
from tests.support.procs import wait_for, wait_for_socket
from tests.support.run_stack import BOUND, LOOPD_BOUND, ctl, run_sh, write_brokerd_config
from tests.support.stack import write_local_config

OWNER = "own0000000000000000000000a"
BOT = "bot0000000000000000000000b"
REPLY_TO = "boxmaker_reply_to"


@pytest.fixture
def run() -> Iterator[tuple[Path, dict[str, str], FakeMattermost]]:
    ensure_built()
    folder = Path(tempfile.mkdtemp(prefix="bx-gw-", dir="/tmp"))
    port = free_port()
    with FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER) as fake:
        token = folder / "gateway.token"
        token.write_text(fake.token + "\n")
        token.chmod(0o600)
        gateway = folder / "gateway.toml"
        table = {
            "mattermost": {"url": fake.url, "token_file": str(token), "allowed_users": [OWNER]},
            "loopd": {"socket": str(folder / "loop.sock")},
            "state": {"folder": str(folder / "gateway")},
        }
        gateway.write_text(toml_dumps(table))
        env = dict(os.environ)
        for name in ("BOXMAKER_SOCKET", "MODEL", "UPSTREAM", "BOXMAKER_UPSTREAM"):
            env.pop(name, None)
        env.update(
            BOXMAKER_RUN=str(folder),
            BOXMAKER_LLAMA_PORT=str(port),
            CONFIG=str(write_local_config(folder)),
            BROKERD_CONFIG=str(write_brokerd_config(folder)),
            GATEWAY=str(gateway),
        )
        started = run_sh(env)
        env.update(
            BOXMAKER_PYTHON=sys.executable,
            BOXMAKER_UPSTREAM=f"127.0.0.1:{port}",
            BOXMAKER_LOOPD_CONFIG=env["CONFIG"],
            BOXMAKER_BROKERD_CONFIG=env["BROKERD_CONFIG"],
            BOXMAKER_GATEWAY_CONFIG=str(gateway),
        )
        try:
            assert started.returncode == 0, started.stdout + started.stderr
            conf_d = sorted(p.name for p in (folder / "supervisord.d").iterdir())
            assert conf_d == ["brokerd.conf", "gatewayd.conf", "llama-server.conf"]
            wait_for_socket(str(folder / "loop.sock"), timeout=LOOPD_BOUND)
            yield folder, env, fake
        except BaseException:
            for name in ("gatewayd.err.log", "loopd.err.log", "supervisord.log"):
                if (folder / name).exists():
                    print(f"--- {name}\n" + (folder / name).read_text()[-3000:])
            raise
        finally:
            pid_file = folder / "supervisord.pid"
            pid = int(pid_file.read_text()) if pid_file.exists() else None
            ctl(env, "shutdown")
            try:
                if pid is not None:
                    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "supervisord exit", BOUND)
            finally:
                shutil.rmtree(folder, ignore_errors=True)


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
