"""`loopd turn` against the REAL llama-server through the REAL inferproxy (single and router).

Three turns of one session, each a new `loopd turn` process: the first creates the session (its
baseline from conf/system.md, within its 3,000-token budget by the server's tokenizer), the second
resumes it, and the third, a new process again, resumes it and its first request hits the prompt
cache the second left: `cache_n` covers the previous total less 64, and the log holds no
CacheLoss. Every request body, captured on the wire by a tee in front of inferproxy, extends the
one before.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import orjson

from boxmaker._toml import toml_dumps
from boxmaker.loopd.llama.info import CACHE_LOSS_SLACK_TOKENS
from boxmaker.proto import CacheLoss, Usage, User
from boxmaker.session.store import SessionStore
from boxmaker.verify.tee import Tee
from tests.support.loopd.conversations import check_requests
from tests.support.procs import python_module
from tests.support.stack import Stack

RUN_BOUND_S = 180.0  # one turn of the tiny model; a few seconds when the machine is idle
MAX_TOKENS = 24
SYSTEM_MD = Path(__file__).resolve().parents[3] / "conf" / "system.md"


def write_config(stack: Stack, tee: Tee) -> tuple[Path, Path]:
    home = stack.dir / f"home-{uuid.uuid4().hex[:8]}"
    # Short answers: the tiny model, left to ramble, recites the tools section of its prompt, and
    # the server's tool-call grammar can then fail the request (HTTP 500).
    table = stack.config_table(socket_path=tee.listen, inference={"max_tokens": MAX_TOKENS})
    table |= {"paths": {"home": str(home)}, "baseline": {"system": str(SYSTEM_MD)}}
    path = stack.dir / f"turn-{home.name}.toml"
    path.write_text(toml_dumps(table))
    return path, home


def loopd_turn(config: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        python_module("boxmaker.loopd", "turn", "--config", str(config), *args),
        capture_output=True,
        text=True,
        timeout=RUN_BOUND_S,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, (done.stderr, lines[-1:])
    assert lines[-1]["type"] == "turn_done"
    return lines


def chat_bodies(tee: Tee) -> list[dict[str, Any]]:
    bodies = []
    for ex in tee.chat_exchanges():
        ex.wait_closed()
        _, _, body = bytes(ex.request).partition(b"\r\n\r\n")
        bodies.append(orjson.loads(body))
    return bodies


def test_a_new_process_resumes_and_hits_the_cache(stack: Stack, tee: Tee) -> None:
    config, home = write_config(stack, tee)
    session = f"real-{uuid.uuid4().hex[:8]}"
    # The same texts every run, so the model (temperature 0, a fixed seed) answers the same way.
    # No flag: the local profile's [loop] thinking (false); the third turn asks for reasoning.
    loopd_turn(config, "--session", session, "--new", "--say", "Say hello.")
    loopd_turn(config, "--session", session, "--say", "Now say goodbye.")
    with SessionStore(home).open(session) as log:
        before = len(log.records)
        previous = log.records[-1]
    assert isinstance(previous, Usage)

    loopd_turn(config, "--session", session, "--say", "Thanks.", "--thinking")

    with SessionStore(home).open(session) as log:
        records = log.records
    assert isinstance(records[before], User)
    first = next(r for r in records[before:] if isinstance(r, Usage))
    total = previous.cache_n + previous.prompt_n + previous.predicted_n
    assert total > CACHE_LOSS_SLACK_TOKENS  # enough for the rule to be able to show a loss
    assert first.cache_n >= total - CACHE_LOSS_SLACK_TOKENS, (first, total)
    assert not [r for r in records if isinstance(r, CacheLoss)]

    bodies = chat_bodies(tee)
    assert len(bodies) == 3  # one completion per turn: the model calls no tool here
    check_requests(bodies)
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == [
        "clock",
        "find_tool",
        "call_tool",
    ]
    assert [b["chat_template_kwargs"]["enable_thinking"] for b in bodies] == [False, False, True]
