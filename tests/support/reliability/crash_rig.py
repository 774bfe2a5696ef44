"""Crash-at-every-point tests' shared pieces (tests/reliability): loopd serve with a crash plan,
a chat reply that stalls mid-stream, and the three things every crash case asserts.

The crash plan is boxmaker/session/crashpoint.py's file form: loopd is started once with
BOXMAKER_CRASH_AT=<folder>/crash.plan (its workers inherit it), and `arm("append_after_write:3")`
writes the plan; the worker that reaches that point SIGKILLs itself and renames the plan to
`crash.plan.fired`, so the next worker of the session runs clean. Counts are per worker process,
so a case that uses a new session (a new worker: spare_worker is off) counts from its first
append.

What a case asserts (`check_after_crash`):
1. nothing acknowledged was lost: the log still starts with every byte it held before the turn,
   and every record whose event reached the client (a `tool_result` event: its ToolResult; the
   final `turn_done`: the whole turn) is in it;
2. the chain verifies (`verify_session`, as `bxctl verify` does);
3. the next turn of the session works (`turn_done`) and is logged.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.proto import ChannelBody, ToolResultEvent, TurnDone, WireError
from boxmaker.session.crashpoint import ENV
from boxmaker.session.verify import verify_session
from tests.support.procs import Daemon, python_module
from tests.support.recorded import Recorded
from tests.support.replies import Reply
from tests.support.serve import START_LINE, ServeEnv, children, config_text, turn

STALL_S = 60.0  # a stalled stream's pause: the test kills something long before it ends


class Stall:
    """Wraps the env's model: while `armed`, the next session reply stops before its finish chunk
    (its content already sent) until the connection is closed; `stalled` counts those sent."""

    def __init__(self, env: ServeEnv) -> None:
        self.model = env.model
        self.armed = False
        self.stalled = 0
        env.fake.on("POST", CHAT_PATH, self)

    def __call__(self, request: Recorded) -> Reply:
        reply = self.model(request)
        body = request.json
        session = isinstance(body, dict) and body["messages"][0]["role"] == "system"
        if not (self.armed and session and reply.status == 200):
            return reply
        self.armed = False
        self.stalled += 1
        pieces = list(reply.pieces)
        # [role, (reasoning), content..., finish, [DONE], last chunk]: wait before the finish.
        pieces[-3] = replace(pieces[-3], delay_s=STALL_S)
        return replace(reply, pieces=pieces)


def start_loopd(
    env: ServeEnv,
    *,
    crash_plan: Path | None = None,
    fd_limit: int | None = None,
    inference: dict[str, Any] | None = None,
    **channel: Any,
) -> Daemon:
    """`loopd serve` as ServeEnv.start does, with BOXMAKER_CRASH_AT set when a plan is given, and
    under `prlimit --nofile` when an fd limit is; `inference` overrides [inference] keys."""
    path = env.folder / "loopd.toml"
    path.write_text(config_text(env.folder, inference=inference, **channel))
    child_env = dict(os.environ)
    child_env.pop(ENV, None)
    if crash_plan is not None:
        child_env[ENV] = str(crash_plan)
    argv = python_module("boxmaker.loopd", "serve", "--config", str(path))
    if fd_limit is not None:
        argv = ["prlimit", f"--nofile={fd_limit}:{fd_limit}", "--", *argv]
    daemon = Daemon(argv, env=child_env)
    env.daemons.append(daemon)
    daemon.wait_for_line(START_LINE, 30.0)
    return daemon


def arm(plan: Path, point: str, n: int) -> None:
    Path(str(plan) + ".fired").unlink(missing_ok=True)
    plan.write_text(f"{point}:{n}\n")


def disarm(plan: Path) -> None:
    plan.unlink(missing_ok=True)


def worker_of(daemon_pid: int, session: str) -> int:
    """The pid of the session's worker (started with `--session <id>`: spare_worker is off)."""
    for pid in children(daemon_pid):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if session.encode() in argv:
            return pid
    raise AssertionError(f"no worker of session {session} under {daemon_pid}")


def fired(plan: Path) -> bool:
    return Path(str(plan) + ".fired").exists()


def log_path(env: ServeEnv, session: str) -> Path:
    return env.home / "sessions" / session / "0.jsonl"


def clear_queue(env: ServeEnv) -> None:
    """Drops the scripted completions a crashed turn left unused."""
    with env.model._lock:
        env.model._queue.clear()


def check_after_crash(
    env: ServeEnv, session: str, before: bytes, frames: list[ChannelBody], *, next_turn: bool = True
) -> list[dict[str, Any]]:
    """The three assertions of a crash case; returns the log's records after the crash."""
    data = log_path(env, session).read_bytes()
    assert data.startswith(before), "the log lost bytes it held before the turn"
    assert data.endswith(b"\n"), f"a partial line in the log: {data[-80:]!r}"
    records = env.log_lines(session)
    turn_records = records[before.count(b"\n") :]
    acked_results = sum(isinstance(f, ToolResultEvent) for f in frames)
    logged_results = sum(r["type"] == "tool_result" for r in turn_records)
    assert logged_results >= acked_results, (
        f"{acked_results} tool results acknowledged, {logged_results} on disk: {turn_records}"
    )
    if frames and isinstance(frames[-1], TurnDone):
        assert turn_records, "a finished turn left no records"
        assert turn_records[-1]["type"] == "usage", turn_records
    finding = verify_session(env.home, session)
    assert finding.ok, finding.line()
    if next_turn:
        clear_queue(env)
        after = turn(env.socket, session, "after the crash")
        assert isinstance(after[-1], TurnDone), after
        users = [r["content"] for r in env.log_lines(session) if r["type"] == "user"]
        assert users[-1] == "after the crash"
        assert verify_session(env.home, session).ok
    return turn_records


def died_mid_turn(frames: list[ChannelBody]) -> bool:
    """The turn's final frame says its worker died (or the connection ended without one)."""
    if not frames:
        return True
    last = frames[-1]
    return isinstance(last, WireError) and "died mid-turn" in last.message
