"""gatewayd as a real process between the fake Mattermost (tests/support/mattermost/fake.py) and
a real `loopd serve` on the scripted fake llama-server (tests/support/serve.py).

`GatewayRig` writes the bot's token file (0600) and a gateway.toml, starts `gatewayd serve` and
restarts it; `crash_at(point)` arms gatewayd's test-only crash hook (gatewayd/crashpoint.py)
through a plan file, so one start dies at that point and the restart runs on. `gateway_stack`
is the three together, as each end-to-end test of gatewayd starts them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from boxmaker._toml import toml_dumps
from tests.support.mattermost.fake import FakeMattermost
from tests.support.procs import Daemon, python_module, wait_for
from tests.support.serve import BOUND_S, QUICK_POLL, REPLY_BOUND_S, ServeEnv, serve_env
from tests.support.turn import say

START_LINE = "gatewayd: socket connected"
REPLY_TO = "boxmaker_reply_to"


class GatewayRig:
    def __init__(
        self,
        env: ServeEnv,
        fake: FakeMattermost,
        uid: int | None = None,
        brokerd: dict[str, Any] | None = None,
        **limits: Any,
    ) -> None:
        """`uid`: gatewayd runs as that user (setpriv; its files are given to it); `brokerd`:
        gateway.toml's [brokerd] table (the chat socket)."""
        self.env = env
        self.uid = uid
        self.fake = fake
        self.folder = env.folder / "gw"
        self.folder.mkdir(exist_ok=True)
        token = self.folder / "token"
        token.write_text(fake.token + "\n")
        token.chmod(0o600)
        self.plan = self.folder / "crash-plan"
        self.config = self.folder / "gateway.toml"
        table = {
            "mattermost": {
                "url": fake.url,
                "token_file": str(token),
                "allowed_users": [fake.owner["id"]],
            },
            "limits": {"typing_interval_ms": 200, **limits},
            "loopd": {"socket": str(env.socket)},
            "state": {"folder": str(self.folder / "state")},
            **({"brokerd": brokerd} if brokerd else {}),
        }
        self.config.write_text(toml_dumps(table))
        if uid is not None:
            (self.folder / "state").mkdir(mode=0o700, exist_ok=True)
            for path in (self.folder, token, self.folder / "state"):
                os.chown(path, uid, uid)
        self.daemons: list[Daemon] = []

    def start(self, wait: bool = True) -> Daemon:
        env = {**os.environ, "BOXMAKER_GATEWAYD_CRASH_AT": str(self.plan)}
        argv = python_module("boxmaker.gatewayd", "serve", "--config", str(self.config))
        if self.uid is not None:
            argv = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                    *argv]  # fmt: skip
        daemon = Daemon(argv, env)
        self.daemons.append(daemon)
        if wait:  # gatewayd's lines go to stderr
            wait_for(
                lambda: any(START_LINE in ln for ln in daemon.err_lines) or daemon.proc.poll(),
                "gatewayd's start line",
                BOUND_S,
            )
            assert daemon.proc.poll() is None, f"gatewayd exited: {daemon.err_lines}"
        return daemon

    def crash_at(self, point: str, n: int = 1) -> None:
        self.plan.write_text(f"{point}:{n}\n")

    def fired(self) -> bool:
        return Path(f"{self.plan}.fired").exists()

    def stop(self) -> None:
        for d in self.daemons:
            d.stop()

    # ---- what the bot posted ----

    def replies(self, channel: str, post_id: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.fake.bot_posts(channel)
            if (p.get("props") or {}).get(REPLY_TO) == post_id
        ]

    def wait_replies(self, channel: str, post_id: str, n: int = 1) -> list[dict[str, Any]]:
        try:
            return wait_for(
                lambda: r if len(r := self.replies(channel, post_id)) >= n else None,
                f"{n} reply post(s) to {post_id}",
                REPLY_BOUND_S,
            )
        except AssertionError as e:
            said = self.daemons[-1].err_lines if self.daemons else []
            raise AssertionError(f"{e}; gatewayd said: {said[-20:]}") from None


OWNER = "own0000000000000000000000a"  # the fake's owner and bot user ids (26 characters)
BOT = "bot0000000000000000000000b"


GatewayStack = tuple[ServeEnv, FakeMattermost, GatewayRig]


@contextmanager
def gateway_stack(**fake_options: Any) -> Iterator[GatewayStack]:
    """A started `loopd serve` on the scripted model, the fake Mattermost (the owner and the bot,
    `fake_options` as FakeMattermost takes them) and a GatewayRig between them, not yet started:
    every gatewayd it started is stopped on the way out."""
    with (
        serve_env() as env,
        FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER, **fake_options) as fake,
    ):
        env.start(inference=QUICK_POLL)  # a held turn's first frame within 0.5 s, not 5
        rig = GatewayRig(env, fake)
        try:
            yield env, fake, rig
        finally:
            rig.stop()


def user_refs(env: ServeEnv, session: str, ref: str) -> int:
    """How many of the session's records carry the post's client_ref."""
    return sum(1 for r in env.log_lines(session) if r.get("client_ref") == ref)


def sentinel(rig: GatewayRig, dm: str) -> None:
    """A later post in the same session, answered: every earlier reply was posted before it."""
    rig.env.model.load([say("sentinel answer")])
    later = rig.fake.post_as(OWNER, dm, "and now?")
    rig.wait_replies(dm, later["id"])


def write_gateway_config(
    folder: Path,
    fake: FakeMattermost,
    loop_socket: Path,
    state: Path,
    limits: dict[str, int] | None = None,
) -> Path:
    """gateway.toml in `folder` for `make run GATEWAY=`, its token file beside it (mode 0600),
    the fake's owner allowed."""
    token = folder / "gateway.token"
    token.write_text(fake.token + "\n")
    token.chmod(0o600)
    table: dict[str, Any] = {
        "mattermost": {"url": fake.url, "token_file": str(token), "allowed_users": [OWNER]},
        "loopd": {"socket": str(loop_socket)},
        "state": {"folder": str(state)},
    }
    if limits:
        table["limits"] = limits
    path = folder / "gateway.toml"
    path.write_text(toml_dumps(table))
    return path
