"""Issue 37 item 10: what loopd can make brokerd write into the decision log for a refused
call is bounded: a denied call's arguments are logged cut to policy.DENIED_ARGS_CHARS, with
the whole call's hash and size, and verify lets only a refusal follow a cut request.
(loopd alone wrote some 6 MB/s of denied 900 KB calls until the disk was full.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.brokerd.broker import Broker
from boxmaker.brokerd.cli import main
from boxmaker.brokerd.policy import DENIED_ARGS_CHARS
from boxmaker.session.chain import verify_chain
from tests.support.brokerd.log import config, forged
from tests.support.cli import run_cli

BIG = "x" * 900_000


def _no(held: object, brief: str) -> None:
    return None


DENIED = {
    "no grant (shell)": ("shell", orjson.dumps({"command": BIG}).decode()),
    "outside the workspace": (
        "write_file",
        orjson.dumps({"path": "../out", "content": BIG}).decode(),
    ),
    "not JSON": ("read_file", "{" + BIG),
    "no such tool": ("no_such_tool", orjson.dumps({"a": BIG}).decode()),
    "an unknown argument": ("read_file", orjson.dumps({"path": "a", "junk": BIG}).decode()),
    "multibyte": ("shell", orjson.dumps({"command": "é" * 450_000}).decode()),
}


@pytest.mark.parametrize("case", DENIED)
def test_a_denied_call_logs_its_arguments_cut_with_hash_and_size(base: Path, case: str) -> None:
    b = Broker(config(base, rotate=1 << 30))
    try:
        log = Path(b.config.log)
        before = os.path.getsize(log)
        tool, args = DENIED[case]
        for _ in range(20):
            got = b.call(tool, args, _no, "s").content
            assert got.startswith("error: denied"), got[:200]
        grown = os.path.getsize(log) - before
        assert grown < 20 * 8 * DENIED_ARGS_CHARS, grown  # not 20 x 2 x 900 KB
    finally:
        b.close()
    records, _ = verify_chain(log.read_bytes())
    req = [r for r in records if r["type"] == "request"][-1]
    assert req["size"] == len(args.encode())
    assert len(req["arguments"]) == DENIED_ARGS_CHARS
    assert len(req["hash"]) == 64
    out = run_cli(main, ["verify", "--log", str(log)])
    assert out.status == 0, out.stdout + out.stderr


def test_an_allow_after_a_cut_request_fails_verify(base: Path, tmp_path: Path) -> None:
    b = Broker(config(base, rotate=1 << 30))
    try:
        b.call("shell", orjson.dumps({"command": BIG}).decode(), _no, "s")
    finally:
        b.close()

    def edit(records: list[dict[str, Any]]) -> None:
        next(r for r in records if r["type"] == "decision")["mode"] = "allow"

    path = tmp_path / "decisions.jsonl"
    path.write_bytes(forged(Path(b.config.log).read_bytes(), edit))
    out = run_cli(main, ["verify", "--log", str(path)])
    assert out.status == 1
    assert "a request logged cut" in out.stdout + out.stderr


def test_an_allowed_call_is_logged_whole(base: Path) -> None:
    b = Broker(config(base, rotate=1 << 30))
    try:
        content = "y" * 5000
        got = b.call("write_file", orjson.dumps({"path": "w", "content": content}).decode(), _no)
        assert got.content.startswith("wrote"), got.content
    finally:
        b.close()
    records, _ = verify_chain(Path(b.config.log).read_bytes())
    req = [r for r in records if r["type"] == "request"][-1]
    assert "size" not in req
    assert content in req["arguments"]
