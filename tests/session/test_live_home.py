"""The home changed under a running `loopd serve` (a real process, its real session workers, the
scripted fake llama-server): a log replaced while its worker holds it, special files where a
session's files should be. Each turn ends with a clear error frame and nothing acknowledged goes
astray; the session serves again once the files are fit.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.proto import ErrorCode, TurnDone, User, WireError
from boxmaker.session.verify import verify_session
from tests.support.procs import Daemon, python_module, wait_for
from tests.support.serve import BOUND_S, START_LINE, ServeEnv, serve_env, turn


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        yield e


def users(log: Path) -> list[str]:
    lines = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    return [r["content"] for r in lines if r["type"] == User.TAG]


def copy_then_move(log: Path) -> None:
    """`cp x 0.jsonl.new && mv 0.jsonl.new 0.jsonl`, what an editor's save and rsync do."""
    shutil.copy(log, log.with_name("0.jsonl.new"))
    os.replace(log.with_name("0.jsonl.new"), log)


def sed_in_place(log: Path) -> None:
    subprocess.run(["sed", "-i", "s/x/x/", str(log)], check=True)


def link_to_a_copy(log: Path) -> None:
    shutil.copy(log, log.with_name("elsewhere.jsonl"))
    log.unlink()
    log.symlink_to("elsewhere.jsonl")


def moved_away(log: Path) -> None:
    os.rename(log, log.with_name("0.jsonl.moved"))


REPLACE: dict[str, Callable[[Path], None]] = {
    "cp-and-mv": copy_then_move,
    "sed-i": sed_in_place,
    "link": link_to_a_copy,
    "moved-away": moved_away,
}


def test_a_log_replaced_under_a_live_worker_loses_no_acknowledged_turn(env: ServeEnv) -> None:
    env.start(worker_idle_ms=600_000)  # the worker keeps the log open between turns
    for how, replace in REPLACE.items():
        session = f"r-{how}"
        log = env.home / "sessions" / session / "0.jsonl"
        assert isinstance(turn(env.socket, session, "one", resume=False)[-1], TurnDone)
        replace(log)
        final = turn(env.socket, session, "two")[-1]
        assert isinstance(final, WireError), (how, final)
        assert final.code == ErrorCode.INTERNAL
        assert f"{log} was replaced while this session was open" in final.message, how
        assert "this turn is not acknowledged" in final.message
        if how == "moved-away":
            assert users(log.with_name("0.jsonl.moved")) == ["one"]
            continue  # no log at the path: the next turn says so (tested below for special files)
        if how == "link":
            log.unlink()
            os.rename(log.with_name("elsewhere.jsonl"), log)  # the owner puts a file back
        # The next turn opens the file now at the path and writes there.
        assert isinstance(turn(env.socket, session, "three")[-1], TurnDone), how
        assert users(log) == ["one", "three"], how
        assert verify_session(env.home, session).ok, how


def plant_fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def plant_folder(path: Path) -> None:
    path.mkdir()


def plant_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def unlocked(log: Path) -> bool:
    """Whether no worker holds the session's log (its flock is free)."""
    fd = os.open(log, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def remove(path: Path) -> None:
    path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()


@pytest.mark.parametrize("name", ["0.jsonl", "0.baseline.json"])
def test_special_files_in_a_session_end_its_turn_with_a_message(env: ServeEnv, name: str) -> None:
    daemon = env.start(worker_idle_ms=100)  # each turn opens the files again
    plants = {
        "fifo": (plant_fifo, "is a FIFO, not a regular file"),
        "folder": (plant_folder, "is a folder"),
        "dev-zero": (plant_zero, "is a symbolic link"),
    }
    for what, (plant, says) in plants.items():
        session = f"s-{what}"
        assert isinstance(turn(env.socket, session, "one", resume=False)[-1], TurnDone)
        path = env.home / "sessions" / session / name
        log = path.with_name("0.jsonl")
        wait_for(functools.partial(unlocked, log), "the idle worker to let go of the log")
        kept = path.with_name("kept")
        os.rename(path, kept)
        plant(path)
        final = turn(env.socket, session, "two")[-1]
        assert isinstance(final, WireError), (what, final)
        assert f"{path}: {says}" in final.message, (what, final)
        remove(path)
        os.rename(kept, path)
        assert isinstance(turn(env.socket, session, "three")[-1], TurnDone), what
        assert users(log) == ["one", "three"]
    assert not [ln for ln in daemon.err_lines if "Traceback" in ln], daemon.err_lines


def test_a_fifo_as_core_memory_ends_a_new_sessions_turn_with_a_message(env: ServeEnv) -> None:
    env.start()
    (env.home / "memory").mkdir(parents=True)
    core = env.home / "memory" / "core.md"
    os.mkfifo(core, 0o600)
    final = turn(env.socket, "new1", "one", resume=False)[-1]
    assert isinstance(final, WireError)
    assert f"{core}: is a FIFO, not a regular file" in final.message
    core.unlink()
    core.write_text("The owner likes tea.\n")
    assert isinstance(turn(env.socket, "new2", "one", resume=False)[-1], TurnDone)


def test_a_second_loopd_serve_on_the_same_home_exits_1_saying_why(env: ServeEnv) -> None:
    first = env.start()
    other = env.folder / "other.toml"
    other.write_text(
        env.write_config().read_text().replace(str(env.socket), str(env.folder / "b.sock"))
    )
    second = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(other)))
    env.daemons.append(second)
    assert second.wait(BOUND_S) == 1
    lock = env.home / "loopd.lock"
    assert any(
        f"another loopd serve is running on the home {env.home} (it holds {lock})" in line
        for line in second.err_lines
    ), second.err_lines
    assert not (env.folder / "b.sock").exists()
    assert isinstance(turn(env.socket, "still", "one", resume=False)[-1], TurnDone)
    assert first.stop() == 0
    # the lock dies with its holder: a new serve takes the home
    again = Daemon(python_module("boxmaker.loopd", "serve", "--config", str(other)))
    env.daemons.append(again)
    again.wait_for_line(START_LINE, BOUND_S)
