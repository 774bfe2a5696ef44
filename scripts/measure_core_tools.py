"""Core tools, measured (issue 28.4; docs/decisions/core-tools.md): on a model profile's local
llama-server with brokerd (verify-device's stack), N fresh conversations for each of read_file,
list_dir and write_file (verify-device's prompts, planted files and rules: the call, its result
and the answer), once with brokerd's tools behind find_tool/call_tool (`[tools] core =
["clock"]`, the default) and once offered directly (`core = ["clock", "read_file", "list_dir",
"write_file"]`); and the baseline's tokens each way, by the server's tokenizer.

    .venv/bin/python scripts/measure_core_tools.py [--model qwen-coder] [--runs 10]
        [--way call_tool|direct]

Prints one line per conversation and a summary per way; load (uptime) before and after.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from boxmaker._toml import toml_dumps
from boxmaker.loopd.config import load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.session.baseline import Baseline, budget_text
from boxmaker.verify.checks import Status
from boxmaker.verify.device import Run
from boxmaker.verify.profile import load_profile
from boxmaker.verify.stack import Stack

WAYS = {
    "via find_tool/call_tool": ["clock"],
    "offered directly": ["clock", "read_file", "list_dir", "write_file"],
}
TASKS = ("read_file", "list_dir", "write_file")


def load() -> str:
    return open("/proc/loadavg").read().split(" ")[0:3].__str__()


def measure(profile_name: str, core: list[str], runs: int) -> tuple[dict[str, int], int, float]:
    profile = load_profile(profile_name)
    table = tomllib.loads(profile.loopd_config.read_text())
    table.setdefault("tools", {})["core"] = core
    folder = Path(tempfile.mkdtemp(prefix="bx-core-"))
    config = folder / "loopd.toml"
    # Relative paths in the profile's config stay relative to its own folder.
    os.symlink(profile.loopd_config.parent / "system.md", folder / "system.md")
    config.write_text(toml_dumps(table))
    stack = Stack(config, None, None, profile)
    run = Run(stack, io.StringIO())
    ok = dict.fromkeys(TASKS, 0)
    started = time.monotonic()
    try:
        stack.start()
        stack.wait_loopd()
        for i in range(runs):
            for task in TASKS:
                check = getattr(run, task)()
                ok[task] += check.status is Status.PASS
                print(f"  {i + 1:2} {check.line()}", flush=True)
        session = run.sessions[0]
        base = stack.home / "sessions" / session / "0.baseline.json"
        baseline = Baseline.from_bytes(base.read_bytes(), str(base))
        tokens = len(Client(load_config(stack.config_path).inference).tokenize(
            budget_text(baseline)))  # fmt: skip
    finally:
        stack.stop()
    return ok, tokens, time.monotonic() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="measure_core_tools")
    parser.add_argument("--model", default="qwen-coder")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--way", choices=["call_tool", "direct"], help="one way only")
    args = parser.parse_args(argv)
    print(f"load before: {load()}")
    ways = list(WAYS.items())
    if args.way:
        ways = ways[:1] if args.way == "call_tool" else ways[1:]
    for way, core in ways:
        print(f"{way}: [tools] core = {core}", flush=True)
        ok, tokens, took = measure(args.model, core, args.runs)
        shown = ", ".join(f"{t} {ok[t]}/{args.runs}" for t in TASKS)
        print(f"{way}: {shown}; baseline {tokens} tokens; {took:.0f} s; load {load()}",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
