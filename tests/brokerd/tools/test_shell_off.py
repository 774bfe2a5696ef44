"""A `shell` call that would be asked while shell is off (no sandbox here) is refused at once,
saying why: the owner is never asked to approve what cannot run (issue 39 item 4; it asked, and
refused after the yes). The decision log still verifies and replays."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from tests.support.brokerd.core import replay
from tests.support.brokerd.rig import Rig, grant


def test_shell_off_is_refused_without_asking(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # no bwrap on brokerd's PATH: shell is off (the venv's bin keeps python reachable)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    rig.grants_text = grant("shell", "ask") + grant("read_file")
    rig.start()
    conn = rig.loopd()
    with conn.sock:
        conn.send("call", {"tool": "shell", "arguments": orjson.dumps({"command": "true"}).decode(),
                           "session": "s1"}, True)  # fmt: skip
        frames = list(rig.frames(conn))
    assert [f.kind for f in frames] == ["result"], frames  # no approval_needed first
    content = str(frames[0].body["content"])
    assert content.startswith("error: refused: shell is off here: bubblewrap (bwrap) is not "), (
        content
    )
    assert content.endswith("; the owner was not asked"), content
    owner = rig.owner()
    with owner.sock:
        owner.send("pending", {}, True)
        pending = owner.recv()
    assert pending is not None
    assert pending.body["calls"] == []
    rig.stop()
    assert replay(rig.log.read_bytes()) >= 1
