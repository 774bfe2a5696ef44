"""A turn whose append meets a full disk (a real 64 KiB tmpfs, tests/support/session/smalldisk.py).

`loopd turn` ends with one `error` line, code `internal`, saying the disk failed and nothing
partial was kept; no traceback. The log still verifies, and the same session goes on once space
is freed. Mounting needs root (CI has it); without it this fails with the reason, never skips.
"""

from __future__ import annotations

import pytest

from boxmaker.proto import User, verify_log
from boxmaker.session.store import SessionStore
from boxmaker.session.verify import verify_session
from tests.support.loopd.turn_command import run, write_config
from tests.support.session.smalldisk import fill, free, small_disk
from tests.support.turn import Env, new_session, say

# 5 KB: more than the log's last page has left (the line needs a page the full disk lacks), and
# under what a turn may hold (loopd turn measures a large message as a worker does: 1,251 of the
# fake's tokens, beside the baseline's 227, within [compact] at's 1,536).
LONG = "Tell me everything. " * 250


def test_a_full_disk_ends_the_turn_with_an_internal_error_and_keeps_the_log(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(env))
    with small_disk(env.home):
        new_session(env.home, "full").close()
        log_path = env.home / "sessions/full/0.jsonl"
        before = log_path.read_bytes()
        fill(env.home)
        status, out, err = run(capsys, "--config", config, "--session", "full", "--say", LONG)
        assert status == 1
        [line] = out
        assert (line["type"], line["code"]) == ("error", "internal")
        assert line["message"].startswith(f"{log_path}: the disk failed: write of line 2 failed")
        assert "ENOSPC" in line["message"]
        assert "nothing partial was kept" in line["message"]
        assert err == f"loopd turn: internal: {line['message']}\n"  # one line, no traceback
        assert log_path.read_bytes() == before
        assert verify_session(env.home, "full").ok
        assert env.fake.requests("/v1/chat/completions") == []  # the request was never sent
        free(env.home)
        env.model.load([say("Here it is.")])
        status, out, _ = run(capsys, "--config", config, "--session", "full", "--say", LONG)
        assert status == 0
        assert out[-1]["content"] == "Here it is."
        with SessionStore(env.home).open("full") as log:
            assert isinstance(log.records[1], User)
            assert log.records[1].content == LONG
        assert verify_log(log_path.read_bytes()).next_seq == 4  # start, user, assistant, usage
