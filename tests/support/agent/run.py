"""Runs one owner task (tests/support/agent/tasks.py) on one side of a started tool-model stack
and gathers its `Outcome`: Boxmaker through `bxctl chat --say` (approvals answered on owner.sock
by bxctl), the floor through tests/support/agent/peer.py on the same llama-server and brokerd.

Each run starts from the task's files alone: the workspace is emptied and laid again, and the
memory folder put back as it was before the suite, so no task sees another's writes or notes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from boxmaker.verify.checks import called_tool, paired_calls, target
from boxmaker.verify.device import Run, json_lines
from tests.support.agent.tasks import PAGES, Call, Outcome, Task
from tests.support.web import Quiet, http_server

# A fetch rule naming 127.0.0.1 (an address named in a rule is the only way fetch reaches
# loopback), asked like the profile's other fetches.
FETCH_GRANT = '[[grant]]\ntool = "fetch"\nmode = "ask"\nhosts = ["127.0.0.1"]\n'


@contextlib.contextmanager
def pages() -> Iterator[str]:
    """The fetch tasks' pages on 127.0.0.1; yields the base URL (no trailing slash)."""

    class Pages(Quiet):
        def do_GET(self) -> None:
            body = PAGES.get(self.path.rstrip("/") or "/", PAGES.get(self.path))
            if body is None:
                self.send_error(404)
            else:
                self.send_page(body)

    with http_server(Pages) as port:
        yield f"http://127.0.0.1:{port}"


class Memory:
    """The memory folder as it was at the start: put back after each run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.saved = {p.name: p.read_bytes() for p in folder.glob("*")} if folder.is_dir() else {}

    def restore(self) -> None:
        if not self.folder.is_dir():  # none was made since
            return
        for p in self.folder.glob("*"):
            if p.name not in self.saved and p.is_file():
                p.unlink()
        for name, data in self.saved.items():
            (self.folder / name).write_bytes(data)


def lay(task: Task, workspace: Path) -> None:
    """The workspace emptied and the task's files written (readable by the sandbox's user)."""
    for child in workspace.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for rel, text in task.files.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if os.geteuid() == 0:  # shell runs as nobody in brokerd's sandbox: it may write here too
        st = workspace.stat()
        for root, dirs, files in os.walk(workspace):
            for name in (*dirs, *files):
                os.chown(os.path.join(root, name), st.st_uid, st.st_gid)


def turns(task: Task, url: str) -> list[str]:
    return [t.replace("{url}", url) for t in task.turns]


def owner_answers(decisions: Path, session: str) -> list[str]:
    """The owner's answers brokerd logged for the calls of `session`, in order."""
    if not decisions.exists():
        return []
    lines = [orjson.loads(x) for x in decisions.read_bytes().splitlines() if x.strip()]
    ids = {x["id"] for x in lines if x.get("type") == "request" and x.get("session") == session}
    return [str(x["answer"]) for x in lines if x.get("type") == "approval" and x["id"] in ids]


def _args(text: str) -> dict[str, Any]:
    try:
        got = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return got if isinstance(got, dict) else {}


def box_calls(records: list[Any]) -> list[Call]:
    out = []
    for call, result in paired_calls(records):
        args = _args(call.arguments)
        if call.name == "call_tool" and isinstance(args.get("arguments"), dict):
            args = args["arguments"]
        tool = target(called_tool(call.name, call.arguments))
        out.append(Call(tool, args, "" if result is None else result.content))
    return out


# One turn's bound: a new session's first turn reads the ~1,200-token baseline cold, over 5
# minutes with the machine's 2 cores shared at load 12 (verify-device's TURN_BOUND is 300 s).
TURN_S = 900.0


def say(run: Run, text: str, session: str, approve: str) -> tuple[str, str]:
    """One `bxctl chat --say --json` turn: (the answer, "" or what ended the turn otherwise)."""
    try:
        p = run.stack.bxctl("--session", session, "--json", "--say", text, timeout=TURN_S,
                            stdin=approve)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "", f"no answer within {TURN_S:.0f} s"
    lines = json_lines(p.stdout)
    final = lines[-1] if lines else {}
    if p.returncode == 0 and "usage" in final:
        return str(final.get("content") or ""), ""
    if "code" in final:
        return "", f"error {final['code']}: {final.get('message')}"
    return "", f"bxctl exited {p.returncode}: {p.stderr.strip()[-200:]}"


def run_box(run: Run, task: Task, url: str, session: str) -> Outcome:
    """The task through `bxctl chat --say`, a turn at a time, in one fresh session."""
    memory = Memory(run.stack.home / "memory")
    lay(task, run.stack.workspace)
    approve = "".join(f"{a}\n" for a in task.approve)
    outcome = Outcome([], [], run.stack.workspace, memory.folder)
    try:
        for text in turns(task, url):
            answer, error = say(run, text, session, approve)
            outcome.answers.append(answer)
            if error:
                outcome.errors.append(error)
        outcome.calls = box_calls(run.records(session))
        outcome.approvals = owner_answers(run.stack.decisions, session)
        outcome.why = task.judge(outcome)  # before the memory folder is put back
    finally:
        memory.restore()
    return outcome


PeerTurn = Callable[[Task, list[str], str, Outcome], None]


def run_peer(run: Run, task: Task, url: str, session: str, peer: PeerTurn) -> Outcome:
    """The task through the floor (`peer`: agent_peer.run_task), judged the same way."""
    memory = Memory(run.stack.home / "memory")
    lay(task, run.stack.workspace)
    outcome = Outcome([], [], run.stack.workspace, memory.folder)
    try:
        peer(task, turns(task, url), session, outcome)
        outcome.approvals = owner_answers(run.stack.decisions, session)
        outcome.why = task.judge(outcome)  # before the memory folder is put back
    finally:
        memory.restore()
    return outcome
