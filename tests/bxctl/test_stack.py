"""bxctl finds what `make run` started (issue 30 item 3): run.env's sockets and home, and the
hint for how the stack was started; never another stack's owner.sock."""

import os
import subprocess
from pathlib import Path

import orjson
import pytest

from boxmaker._defaults import DEFAULT_SOCKET
from boxmaker.bxctl.stack import find_stack, home_for, read_run_env, tools_line


def make_run(folder: Path) -> Path:
    run = folder / "run"
    run.mkdir()
    (run / "run.env").write_text(
        f"BOXMAKER_SOCKET={run}/loop.sock\nBOXMAKER_HOME={run}/home\n"
        f"BOXMAKER_OWNER_SOCKET={run}/owner\\ dir/owner.sock\nnot a line\n"
    )
    return run


def test_make_runs_sockets_and_home_are_found_with_no_flag(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    stack = find_stack(None, None, {"BOXMAKER_RUN": str(run)})
    assert stack.socket == run / "loop.sock"
    assert stack.owner_socket == run / "owner dir" / "owner.sock"  # printf %q's quoting undone
    assert stack.home == run / "home"
    assert stack.run == run
    assert "`make run` in" in stack.start_hint()
    assert "make ctl" not in stack.start_hint()  # no supervisord (after make stop): make run only
    (run / "supervisord.pid").write_text(f"{os.getpid()}\n")  # a live pid: make ctl works too
    assert 'or `make ctl CMD="start loopd"`' in stack.start_hint()
    assert "make chat" in stack.owner_hint()
    assert home_for(None, {"BOXMAKER_RUN": str(run)}) == run / "home"


def test_flags_and_variables_win_over_run_env(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    env = {"BOXMAKER_RUN": str(run), "BOXMAKER_OWNER_SOCKET": "/o.sock"}
    stack = find_stack(None, Path("/flag.sock"), env)
    assert stack.owner_socket == Path("/flag.sock")
    assert find_stack(None, None, env).owner_socket == Path("/o.sock")
    assert home_for(Path("/h"), env) == Path("/h")


def test_another_socket_never_takes_make_runs_owner_socket(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    for env in (
        {"BOXMAKER_RUN": str(run), "BOXMAKER_SOCKET": str(tmp_path / "other.sock")},
        {"BOXMAKER_RUN": str(run)},
    ):
        arg = None if "BOXMAKER_SOCKET" in env else tmp_path / "other.sock"
        stack = find_stack(arg, None, env)
        assert stack.socket == tmp_path / "other.sock"
        assert stack.owner_socket is None
        assert stack.home is None
        assert stack.run is None
        assert "supervisorctl" in stack.start_hint()


def test_no_run_env_is_the_packaged_default(tmp_path: Path) -> None:
    stack = find_stack(None, None, {"BOXMAKER_RUN": str(tmp_path / "none")})
    assert stack.socket == DEFAULT_SOCKET
    assert stack.run is None


def test_an_oversized_or_unreadable_run_env_is_ignored(tmp_path: Path) -> None:
    big = tmp_path / "run.env"
    big.write_text("BOXMAKER_SOCKET=/x\n" * 10_000)
    assert read_run_env(big) == {}
    assert read_run_env(tmp_path / "missing") == {}
    (tmp_path / "dir.env").mkdir()
    assert read_run_env(tmp_path / "dir.env") == {}


def test_the_tools_line_is_brokerds_current_state(tmp_path: Path) -> None:
    """Issue 39 item 4: the line is the state this brokerd wrote (brokerd.state), never the
    last start line of an older brokerd's log; a brokerd that is gone or failing offers none."""
    (tmp_path / "brokerd.log").write_text(
        "brokerd: listening on /b, workspace /old, shell: sandbox ready\n"
    )
    state = tmp_path / "brokerd.state"
    assert "none yet: brokerd has not started" in tools_line(tmp_path)
    ready = {"state": "ready", "pid": os.getpid(), "at": 0.0, "workspace": "/w",
             "tools": ["read_file", "note", "shell"], "shell": "off: no bwrap"}  # fmt: skip
    state.write_bytes(orjson.dumps(ready))
    assert tools_line(tmp_path) == "[tools: read_file, note, shell off: no bwrap; workspace /w]"
    state.write_bytes(orjson.dumps({**ready, "shell": "sandbox ready"}))
    assert "note, shell (sandboxed);" in tools_line(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    state.write_bytes(orjson.dumps({**ready, "pid": gone.pid}))
    assert "none: brokerd is not running (it was ready)" in tools_line(tmp_path)
    failed = {"state": "failed", "pid": gone.pid, "at": 0.0, "error": "/g.toml: line 3: fix it"}
    state.write_bytes(orjson.dumps(failed))
    assert tools_line(tmp_path) == "[tools: none: brokerd cannot start: /g.toml: line 3: fix it]"
    # supervisord started it again: starting, with the failure before it kept
    again = {"state": "starting", "pid": os.getpid(), "at": 0.0, "last_failure": "/g.toml: x"}
    state.write_bytes(orjson.dumps(again))
    assert tools_line(tmp_path) == "[tools: none: brokerd cannot start: /g.toml: x]"
    # run.env names where make run's brokerd writes it
    elsewhere = tmp_path / "b" / "brokerd.state"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(orjson.dumps(ready))
    (tmp_path / "run.env").write_text(f"BOXMAKER_BROKERD_STATE={elsewhere}\n")
    assert tools_line(tmp_path).endswith("; workspace /w]")


def test_a_checkout_whose_make_run_has_not_run_says_make_run(tmp_path: Path) -> None:
    """The new-user trial: `make chat` before `make run` (or while it still builds) said to
    start loopd with `supervisorctl -c <your supervisord.conf>`; in a checkout it is make run."""
    (tmp_path / "Makefile").write_text("run:\n")
    (tmp_path / "run").mkdir()
    stack = find_stack(None, None, {"BOXMAKER_RUN": str(tmp_path / "run")})
    assert stack.unstarted == tmp_path
    hint = stack.start_hint()
    assert hint.startswith(f"`make run` has not started a stack in {tmp_path} (no ")
    assert "supervisorctl" not in hint
    assert stack.owner_hint() == f"`make run` in {tmp_path}"
    named = find_stack(Path("/x.sock"), None, {"BOXMAKER_RUN": str(tmp_path / "run")})
    assert named.unstarted is None  # a loopd named elsewhere: its own hint
    assert "supervisorctl" in named.start_hint()


def test_sessions_verify_and_repair_find_make_runs_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new-user trial: `bxctl sessions` after `make run` said "no sessions under
    /var/lib/boxmaker"; history and chat found run/home, the other commands did not."""
    from boxmaker.bxctl.cli import main
    from tests.support.cli import run_cli

    run = make_run(tmp_path)
    assert home_for(None, {"BOXMAKER_RUN": str(run)}) == run / "home"
    assert home_for(None, {"BOXMAKER_RUN": str(run), "BOXMAKER_HOME": "/h"}) == Path("/h")
    (run / "home" / "sessions").mkdir(parents=True)
    monkeypatch.setenv("BOXMAKER_RUN", str(run))
    monkeypatch.delenv("BOXMAKER_HOME", raising=False)
    shown = run_cli(main, ["sessions"])
    assert f"no sessions under {run / 'home'}" in shown.stdout + shown.stderr
