"""The owner-task suite (issue 40.1; docs/decisions/agent-tasks.md): `make agent-tasks`.

One tool-model stack (the qwen-coder profile's llama-server, brokerd, inferproxy, loopd, as
verify-device starts it), then each task of tests/support/agent/tasks.py in turn, on Boxmaker
(`bxctl chat --say`, a fresh session) and on the stock-framework floor (tests/support/
agent_peer.py: LangChain's create_agent, or the minimal OpenAI-client loop) on the same server,
one after the other so both meet the same load. Each run is judged from the disk, brokerd's
decision log and the calls; one JSON line per run is appended to --out as it ends (a cut run
keeps what it measured), and the table (task kind x pass, each side) is printed at the end.

    .venv/bin/python scripts/agent_tasks.py [--side box|peer|both] [--peer langchain|openai]
        [--tasks port,copy,...] [--kinds read,write,...] [--out FILE] [--label before]
    .venv/bin/python scripts/agent_tasks.py --table FILE [FILE ...]   # the table of saved runs
"""

from __future__ import annotations

import argparse
import io
import os
import pwd
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from boxmaker.verify.device import Run
from tests.support.agent.run import FETCH_GRANT, pages, run_box, run_peer
from tests.support.agent.tasks import KINDS, TASKS, Outcome, Task, by_name
from tests.support.agent.tool_model import _Stack


def start(before: Path | None = None, upstream: str | None = None) -> Run:
    """The profile's stack. `before`: a checkout of an earlier tree whose loopd, brokerd and
    config run instead (on PYTHONPATH); `upstream`: another stack's llama-server to use."""
    from tests.support.llama import ensure_tool_model

    ensure_tool_model()
    stack = _Stack({})
    if before is not None:
        stack.source = before / "conf" / "loopd.qwen-coder.toml"
        # its compiled twins, in place: the earlier tree's inferproxy imports its own
        subprocess.run([sys.executable, "setup.py", "--quiet", "build_ext", "--inplace"],
                       cwd=before, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    stack.upstream = upstream
    stack.extra_grants = FETCH_GRANT
    if os.geteuid() == 0:  # shell's sandbox user must reach the workspace (tool_model_run)
        os.chmod(stack.run, 0o755)
        stack.workspace.mkdir()
        nobody = pwd.getpwnam("nobody")
        os.chown(stack.workspace, nobody.pw_uid, nobody.pw_gid)
    run = Run(stack, io.StringIO())
    saved = os.environ.get("PYTHONPATH")
    if before is not None:  # the stack's programs and its bxctl run the earlier tree's code
        os.environ["PYTHONPATH"] = str(before)
        # and `python -m` must not put the current folder (this tree) before it: loopd's session
        # workers ran this tree's turn loop beside the earlier brokerd until 2026-12-03
        os.environ["PYTHONSAFEPATH"] = "1"
    try:
        stack.start()
        stack.wait_loopd()
    except BaseException:
        stack.stop()
        raise
    finally:
        os.environ.pop("PYTHONPATH", None)
        os.environ.pop("PYTHONSAFEPATH", None)
        if saved is not None:
            os.environ["PYTHONPATH"] = saved
    return run


def peer_of(name: str, run: Run) -> Callable[..., None]:
    from tests.support.agent import peer as agent_peer

    if name == "langchain":
        return agent_peer.langchain_peer(run)
    return agent_peer.openai_peer(run)


def line(side: str, task: Task, outcome: Outcome, seconds: float, label: str) -> dict[str, Any]:
    why = outcome.why
    return {
        "label": label, "side": side, "task": task.name, "kind": task.kind,
        "pass": why is None, "why": why or "", "seconds": round(seconds, 1),
        "calls": [c.tool for c in outcome.calls], "answers": [a[:300] for a in outcome.answers],
        "trace": [[c.tool, orjson.dumps(c.args).decode()[:200], c.result[:200]]
                  for c in outcome.calls],  # what each call asked and got, to read a failure by
        "errors": outcome.errors, "load": os.getloadavg()[0],
    }  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    """Task kind x pass, a column per (label, side), and the totals."""
    cols = list(dict.fromkeys((r.get("label", ""), r["side"]) for r in rows))
    got: dict[tuple[str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        got[(r.get("label", ""), r["side"])][r["kind"]].append(bool(r["pass"]))
    kinds = [k for k in KINDS if any(k in got[c] for c in cols)]
    head = ["kind", *(f"{label} {side}".strip() for label, side in cols)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(col: tuple[str, str], kind: str | None) -> str:
        runs = [p for k, ps in got[col].items() if kind in (None, k) for p in ps]
        return f"{sum(runs)} of {len(runs)}" if runs else "-"

    out += ["| " + " | ".join([kind, *(cell(c, kind) for c in cols)]) + " |" for kind in kinds]
    out.append("| **total** | " + " | ".join(f"**{cell(c, None)}**" for c in cols) + " |")
    return "\n".join(out)


def _interrupted(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=("box", "peer", "both"), default="both")
    ap.add_argument("--peer", choices=("langchain", "openai"), default="langchain")
    ap.add_argument("--tasks", default="", help="task names, comma-separated (default: all)")
    ap.add_argument("--kinds", default="", help="task kinds, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("agent-tasks.jsonl"))
    ap.add_argument("--label", default="", help="a word for this run's rows (before, after)")
    ap.add_argument("--table", type=Path, nargs="+", help="print the table of saved runs only")
    ap.add_argument("--before", type=Path, help="a checkout of an earlier tree: each task runs "
                    "on it first (side 'before'), on the same llama-server")  # fmt: skip
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # a stopped run still stops its stacks
    if args.table:
        saved = [orjson.loads(x) for p in args.table for x in p.read_bytes().splitlines() if x]
        print(table(saved))
        return 0
    tasks = by_name(args.tasks.split(",")) if args.tasks else list(TASKS)
    if args.kinds:
        tasks = [t for t in tasks if t.kind in args.kinds.split(",")]
    sides: tuple[str, ...] = ("box", "peer") if args.side == "both" else (args.side,)
    if args.before is not None:
        sides = ("before", *sides)
    if "peer" in sides:  # fail now, not after the model's start
        __import__("langchain.agents" if args.peer == "langchain" else "openai")
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    print(f"starting the tool-model stack (load {os.getloadavg()[0]:.1f})", flush=True)
    run = start()
    print(f"stack up in {time.monotonic() - t0:.0f} s", flush=True)
    runs = {"box": run, "peer": run}
    try:
        if args.before is not None:
            runs["before"] = start(args.before, run.stack.env["BOXMAKER_UPSTREAM"])
            print(f"the earlier tree's stack up in {time.monotonic() - t0:.0f} s", flush=True)
        peer = peer_of(args.peer, run) if "peer" in sides else None
        with pages() as url:
            for task in tasks:
                for side in sides:
                    session = f"{side}-{task.name}-{int(time.time())}"
                    began = time.monotonic()
                    try:
                        if side != "peer":
                            outcome = run_box(runs[side], task, url, session)
                        else:
                            assert peer is not None
                            outcome = run_peer(run, task, url, session, peer)
                    except Exception as exc:  # one task's breakage is its failure, not the run's
                        outcome = Outcome([], [], runs[side].stack.workspace, run.stack.home)
                        outcome.why = f"the runner failed: {type(exc).__name__}: {exc}"[:300]
                    row = line(side, task, outcome, time.monotonic() - began, args.label)
                    rows.append(row)
                    with args.out.open("ab") as f:
                        f.write(orjson.dumps(row) + b"\n")
                    mark = "PASS" if row["pass"] else "FAIL"
                    print(f"{mark} {side:4} {task.kind:10} {task.name:16} {row['seconds']:6.0f} s "
                          f"load {row['load']:.1f} calls {row['calls']} {row['why']}",
                          flush=True)  # fmt: skip
    finally:
        if "before" in runs:
            runs["before"].stack.stop()
        run.stack.stop()
    print(table(rows))
    print(f"{len(rows)} runs in {time.monotonic() - t0:.0f} s; rows appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
