"""One turn kit per session (issue 35.3, turn/kit.py): `loopd turn` and a session worker assemble
the same kit from the same config, so a turn runs alike through either. Before, `loopd turn`
measured no message (an 8 KB one the worker refuses went into its log), and gave brokerd no
epoch and no tool timeout. And one rule of `[compact] at` (compact.Room): the fold's settings
and the message's fit carry the same room."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from boxmaker.loopd.cli import main
from boxmaker.loopd.config import parse_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.turn.compact import Room
from boxmaker.loopd.turn.kit import TurnKit
from boxmaker.proto import ErrorCode, TurnDone, WireError
from tests.support.cli import run_cli
from tests.support.serve import ServeEnv, config_text, serve_env, turn

TOO_LONG = "Tell me everything. " * 400  # 2,001 of the fake's tokens; a turn holds 1,536


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        e.start(spare_worker=False)
        yield e


def loopd_turn(env: ServeEnv, session: str, text: str, *flags: str) -> dict[str, object]:
    """`loopd turn` on the env's own config (the file `loopd serve` runs): its last line."""
    config = env.folder / "loopd.toml"
    done = run_cli(main, ["turn", "--config", config, "--session", session, *flags, "--say", text])
    last: dict[str, object] = orjson.loads(done.stdout.splitlines()[-1])
    return last


def test_loopd_turn_and_a_worker_refuse_a_message_too_large_alike(env: ServeEnv) -> None:
    assert isinstance(turn(env.socket, "w", "hello", resume=False)[-1], TurnDone)
    assert loopd_turn(env, "t", "hello", "--new")["type"] == "turn_done"
    served = env.model.served
    by_worker = turn(env.socket, "w", TOO_LONG)[-1]
    by_turn = loopd_turn(env, "t", TOO_LONG)
    assert isinstance(by_worker, WireError), by_worker
    assert by_worker.code is ErrorCode.BAD_REQUEST
    assert "this message is 2,001 tokens" in by_worker.message, by_worker.message
    assert by_turn == {"type": "error", **by_worker.to_json()}  # word for word
    assert env.model.served == served  # neither asked the model
    assert env.record_types("t") == env.record_types("w")  # nor recorded it


@pytest.mark.parametrize("compact", [{"at": 0.6}, {"at": 0.9, "enabled": False}])
def test_the_fold_and_the_fit_share_one_room(env: ServeEnv, compact: dict[str, object]) -> None:
    text = config_text(env.folder, compact={"enabled": True, **compact})
    config = parse_config(text, "loopd.toml", env.folder)
    kit = TurnKit.from_config(config, Client(config.inference))
    room = Room(2048, float(str(compact["at"])))
    assert kit.room == kit.fit.room == room
    if kit.compactor is not None:
        assert kit.compactor.settings.room == room
    else:
        assert compact.get("enabled") is False  # off: no fold, but a message is still measured
