"""The Mattermost token nowhere it should not be (M4 section 1, issue 36): the whole stack as
`make run GATEWAY=...` starts it (fake Mattermost -> gatewayd under supervisord -> loopd -> the
real llama-server), driven through faults that make gatewayd retry and log errors (429s, 5xx, a
lost answer, dropped and refused sockets, a restart); then every file under the run folder (the
programs' logs, supervisord's, the session logs, gatewayd's state) and every byte gatewayd sent
to loopd (a tee in front of loop.sock) is searched for the token, and every post and typing call
the bot made. The token file lives outside the run folder, so nothing there is excused."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.verify.tee import Tee
from tests.support.gateway import BOT, OWNER, write_gateway_config
from tests.support.mattermost.fake import FakeMattermost
from tests.support.procs import wait_for, wait_for_socket
from tests.support.run_stack import BOUND, LOOPD_BOUND, ctl, run_stack

REPLY_TO = "boxmaker_reply_to"


class Run:
    def __init__(self, folder: Path, env: dict[str, str], fake: FakeMattermost, tee: Tee) -> None:
        self.folder, self.env, self.fake, self.tee = folder, env, fake, tee

    def replies(self, channel: str, post_id: str) -> list[dict[str, object]]:
        posts = self.fake.bot_posts(channel)
        return [p for p in posts if (p.get("props") or {}).get(REPLY_TO) == post_id]

    def answered(self, channel: str, post_id: str) -> list[dict[str, object]]:
        return wait_for(
            lambda: self.replies(channel, post_id), f"a reply to {post_id}", LOOPD_BOUND
        )

    def connected(self, times: int) -> None:
        """gatewayd's log says a fresh socket `times` times (a lossless resume says otherwise)."""
        log = self.folder / "gatewayd.err.log"
        wait_for(
            lambda: log.exists() and log.read_text().count("socket connected") >= times,
            f"gatewayd's socket ({times})",
            BOUND,
        )


@pytest.fixture
def run() -> Iterator[Run]:
    folder = Path(tempfile.mkdtemp(prefix="bx-gwt-", dir="/tmp"))
    outside = Path(tempfile.mkdtemp(prefix="bx-gwt-token-", dir="/tmp"))
    with FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER) as fake:
        limits = {"rest_timeout_ms": 3000, "backoff_max_ms": 500, "typing_interval_ms": 500}
        # loopd's socket for gatewayd is the tee, in front of loop.sock
        gateway = write_gateway_config(
            outside, fake, folder / "gw-loop.sock", folder / "gateway", limits
        )
        tee = Tee(folder / "gw-loop.sock", folder / "loop.sock")
        logs = ("gatewayd.err.log", "loopd.err.log", "supervisord.log")
        try:
            with run_stack(logs, run=folder, settings=lambda _: {"GATEWAY": str(gateway)}) as rs:
                started = rs.started
                assert started.returncode == 0, started.stdout + started.stderr
                wait_for_socket(str(folder / "loop.sock"), timeout=LOOPD_BOUND)
                yield Run(folder, rs.env, fake, tee)
        finally:
            tee.stop()
            shutil.rmtree(outside, ignore_errors=True)


def files_holding(folder: Path, secret: bytes) -> tuple[list[str], int]:
    """The files under `folder` whose bytes hold `secret`, and how many files were read."""
    found, read = [], 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            read += 1
            if secret in path.read_bytes():
                found.append(str(path.relative_to(folder)))
    return found, read


def test_the_token_is_in_no_file_frame_or_post_after_faults_and_retries(run: Run) -> None:
    fake, secret = run.fake, run.fake.token.encode()
    run.connected(1)
    dm = fake.direct_channel(OWNER)
    # REST faults on the way of the first answer: a 429 twice, 5xx twice, one answer lost
    fake.rate_limit(2, retry_after=0.2, reset_header=False)
    fake.fail_next(2, 503)
    fake.lose_answers(1)
    first = fake.post_as(OWNER, dm, "Say hello in three words.")
    run.answered(dm, first["id"])
    # the socket: dropped, then upgrades refused for a while, the server restarted (lossy)
    fake.drop_after(0)
    fake.refuse_upgrades(502)
    second = fake.post_as(OWNER, dm, "Name one colour.")
    wait_for(lambda: len(fake.upgrades) >= 3, "gatewayd's retried upgrades", BOUND)
    fake.refuse_upgrades(0)
    run.answered(dm, second["id"])
    before = (run.folder / "gatewayd.err.log").read_text().count("socket connected")
    fake.restart()
    run.connected(before + 1)
    # the server failing longer than rest_timeout_ms: errors gatewayd logs, then retries
    log = run.folder / "gatewayd.err.log"
    fake.fail_next(40, 503)
    third = fake.post_as(OWNER, dm, "Name one animal.")
    wait_for(lambda: "failed (" in log.read_text(), "an error line in gatewayd's log", BOUND)
    run.answered(dm, third["id"])
    # a token refused for a moment (REST 401s), and gatewayd restarted: its catch-up answers
    fake.refuse_auth(True)
    fourth = fake.post_as(OWNER, dm, "Name one fruit.")
    fake.refuse_auth(False)
    assert ctl(run.env, "restart", "gatewayd").returncode == 0
    run.answered(dm, fourth["id"])

    found, read = files_holding(run.folder, secret)
    assert read >= 10, f"only {read} files under the run folder: the search missed them"
    assert found == [], f"the token is in {found}"
    frames = [bytes(ex.request) for ex in run.tee.exchanges]
    assert len(frames) >= 3, "gatewayd's turns did not go through the tee"
    assert all(b'"client_ref"' in f for f in frames)
    assert not any(secret in f for f in frames), "a frame gatewayd sent to loopd holds the token"
    assert not any(secret in bytes(ex.response) for ex in run.tee.exchanges)
    posts = fake.posts(dm)
    assert not any(fake.token in str(p) for p in posts), "a post holds the token"
    assert not any(fake.token in str(t) for t in fake.typing)
