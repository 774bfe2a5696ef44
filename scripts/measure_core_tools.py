"""Core tools, measured (issue 28.4; docs/decisions/core-tools.md): on a model profile's local
llama-server with brokerd (verify-device's stack), ten fresh conversations for each of
read_file, list_dir and write_file, once with brokerd's tools behind find_tool/call_tool
(`[tools] core = ["clock"]`, the default) and once offered directly (`core = ["clock",
"read_file", "list_dir", "write_file"]`); and the baseline's tokens each way, by the server's
tokenizer.

At temperature 0 ten identical conversations say no more than one, so the ten of a task differ
(phrasing, file names, contents: VARIANTS, fixed here, the same for both ways). Each is judged by
verify-device's rules (checks.py): the call, its ToolResult's content, the answer using it;
write_file approved on owner.sock and the file's bytes read back.

Both ways run at once on one llama-server (-np 2): the first stack starts it and its loopd uses
slot 0; the second stack's loopd reaches it as an owner's server would (inferproxy, --upstream)
and uses slot 1. So the two ways share the same machine load, conversation for conversation.

    .venv/bin/python scripts/measure_core_tools.py [--model qwen-coder] [--runs 10]

Prints one line per conversation (with its time) and a summary per way; load before and after.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from boxmaker._toml import toml_dumps
from boxmaker.loopd.config import load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.session.baseline import Baseline, budget_text
from boxmaker.verify import checks, device
from boxmaker.verify.checks import Check, Status
from boxmaker.verify.device import Run, _read
from boxmaker.verify.profile import Profile, load_profile
from boxmaker.verify.stack import Stack

WAYS = {
    "via find_tool/call_tool": ["clock"],
    "offered directly": ["clock", "read_file", "list_dir", "write_file"],
}
TASKS = ("read_file", "list_dir", "write_file")


@dataclass(frozen=True)
class Variant:
    prompt: str
    path: str  # the file to read or write, or the folder to list
    text: str = ""  # read_file: the file's text; write_file: the text asked for
    names: tuple[str, ...] = ()  # list_dir: the files planted in the folder
    answer: tuple[str, ...] = ()  # read_file: what the answer must quote


# fmt: off
VARIANTS: dict[str, list[Variant]] = {
    "read_file": [
        Variant("Read the file notes.txt and tell me the locker code written in it.",
                "notes.txt", "The locker code is 4821.", answer=("4821",)),
        Variant("What is the wifi password in wifi.txt?",
                "wifi.txt", "Wifi password: maple-7731", answer=("maple-7731",)),
        Variant("How hot should the oven be? It says in recipe.txt.",
                "recipe.txt", "Bake the bread at 215 degrees for 40 minutes.", answer=("215",)),
        Variant("Open meeting.txt and tell me which room the meeting is in.",
                "meeting.txt", "The meeting with Dana is on Thursday at 14:30 in room B12.",
                answer=("B12",)),
        Variant("Which spice is on my shopping list in shopping.txt?",
                "shopping.txt", "Buy: eggs, lemons, rye flour and saffron.",
                answer=("saffron",)),
        Variant("Check plate.txt for my car's number plate.",
                "plate.txt", "The car's plate is KX-5092.", answer=("KX-5092",)),
        Variant("When is Mira's birthday? Read birthday.txt.",
                "birthday.txt", "Mira's birthday is on 9 October.", answer=("October",)),
        Variant("Read server.txt: what is the backup server's address?",
                "server.txt", "The backup server is at 10.4.7.19.", answer=("10.4.7.19",)),
        Variant("How much is the roof repair quote in quote.txt?",
                "quote.txt", "The quote for the roof repair is 3870 euros.", answer=("3870",)),
        Variant("Read the file door.txt and tell me where the back door key is.",
                "door.txt", "The back door key is under the blue flowerpot.",
                answer=("flowerpot",)),
    ],
    "list_dir": [
        Variant("List the files in the folder box.", "box", names=("apple-314.txt", "pear.txt")),
        Variant("What files are in the photos folder?", "photos",
                names=("beach.jpg", "hills.png")),
        Variant("Show me what is inside the invoices directory.", "invoices",
                names=("march.pdf", "april.pdf", "may.pdf")),
        Variant("Which files does the drafts folder contain?", "drafts",
                names=("letter-to-ana.md", "poem.md")),
        Variant("List the contents of the folder music.", "music",
                names=("song-one.mp3", "song-two.mp3")),
        Variant("What is in the taxes folder? List it.", "taxes",
                names=("2024.csv", "receipts.txt")),
        Variant("Tell me the names of the files in the garden folder.", "garden",
                names=("roses.txt", "tomatoes.txt", "shed-plan.txt")),
        Variant("List the directory code.", "code", names=("main.py", "util.py")),
        Variant("I keep travel notes in the folder trips. Which files are there?", "trips",
                names=("lisbon.txt", "oslo.txt")),
        Variant("Please list the folder kitchen.", "kitchen",
                names=("fridge-list.txt", "oven-manual.txt")),
    ],
    "write_file": [
        Variant('Write the text "hello from verify-device" to the file greeting.txt.',
                "greeting.txt", "hello from verify-device"),
        Variant("Create a file todo.txt containing: call the plumber", "todo.txt",
                "call the plumber"),
        Variant('Save "milk, bread, apples" in a file named list.txt.', "list.txt",
                "milk, bread, apples"),
        Variant('Put the sentence "Keep it simple." into motto.txt.', "motto.txt",
                "Keep it simple."),
        Variant("Write a file reminder.txt that says: Dentist on Friday at 9", "reminder.txt",
                "Dentist on Friday at 9"),
        Variant('Make a file hello.md with the text "Hello, world".', "hello.md",
                "Hello, world"),
        Variant("Store the number 2468 in a new file pin.txt.", "pin.txt", "2468"),
        Variant('Leave a note for Sam: write "Feed the cat twice a day." to note-for-sam.txt.',
                "note-for-sam.txt", "Feed the cat twice a day."),
        Variant("Write red green blue into the file colors.txt.", "colors.txt",
                "red green blue"),
        Variant('Please write "all systems go" to status.txt.', "status.txt", "all systems go"),
    ],
}
# fmt: on


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split(" ")[0:3])


def config_for(profile: Profile, core: list[str], slot: int) -> Path:
    """The profile's loopd config with `core` and its own slot; no slot files (each
    conversation is fresh, and the two loopds share one server's --slot-save-path)."""
    table = tomllib.loads(profile.loopd_config.read_text())
    table.setdefault("tools", {})["core"] = core
    table.setdefault("inference", {})["slots"] = [slot]
    table.setdefault("cache", {})["slot_save"] = False
    folder = Path(tempfile.mkdtemp(prefix="bx-core-"))
    # Relative paths in the profile's config stay relative to its own folder.
    os.symlink(profile.loopd_config.parent / "system.md", folder / "system.md")
    (folder / "loopd.toml").write_text(toml_dumps(table))
    return folder / "loopd.toml"


def converse(run: Run, way: int, task: str, i: int, v: Variant) -> Check:
    """One fresh conversation: plant, ask, judge (verify-device's rules)."""
    ws = run.stack.workspace
    session = f"core-{way}-{task.replace('_', '-')}-{i}"
    approve = ""
    if task == "read_file":
        (ws / v.path).write_text(v.text + "\n")
        rule = checks.contains_rule([v.text], v.answer)
    elif task == "list_dir":
        (ws / v.path).mkdir()
        for n in v.names:
            (ws / v.path / n).write_text(n)
        rule = checks.contains_rule(v.names, v.names)
    else:
        target = ws / v.path
        rule = checks.written_rule(v.text.encode(), lambda: _read(target))
        approve = "yes\n"
    done, error = run.say(v.prompt, session, approve)
    return checks.judge_tool_turn(task, run.records(session), done, error, task, rule, "")


def measure_way(
    name: str, run: Run, way: int, runs: int, out: dict[str, object], lock: threading.Lock
) -> None:
    ok = dict.fromkeys(TASKS, 0)
    took: list[float] = []
    for i in range(runs):
        for task in TASKS:
            started = time.monotonic()
            try:
                check = converse(run, way, task, i, VARIANTS[task][i % len(VARIANTS[task])])
            except Exception as exc:  # one conversation's failure is its FAIL, not the run's
                check = Check(task, Status.FAIL, f"{type(exc).__name__}: {exc}", "")
            took.append(time.monotonic() - started)
            ok[task] += check.status is Status.PASS
            shown = check.line().replace(" (expected: )", "")[:400]
            with lock:
                print(f"[{name}] {i + 1:2} {took[-1]:4.0f} s {shown}", flush=True)
    session = run.sessions[0]
    base = run.stack.home / "sessions" / session / "0.baseline.json"
    baseline = Baseline.from_bytes(base.read_bytes(), str(base))
    client = Client(load_config(run.stack.config_path).inference)
    out.update(ok=ok, tokens=len(client.tokenize(budget_text(baseline))), took=took)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="measure_core_tools")
    parser.add_argument("--model", default="qwen-coder")
    parser.add_argument("--runs", type=int, default=10, help="conversations per task and way")
    parser.add_argument("--turn-bound", type=float, default=device.TURN_BOUND,
                        help="seconds for one conversation's turn (verify-device's bound): a "
                        "turn cut by it is a FAIL that says nothing of the model; raise it on "
                        "a loaded machine")  # fmt: skip
    args = parser.parse_args(argv)
    device.TURN_BOUND = args.turn_bound  # Run.say reads it at each turn
    profile = load_profile(args.model)
    # A background run (nohup ... &) ignores SIGINT: stop it with SIGTERM, which stops its stacks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"load before: {load()}", flush=True)
    (call_name, call_core), (direct_name, direct_core) = WAYS.items()
    first = Stack(config_for(profile, call_core, 0), None, None, profile)
    stacks = [first]
    started = time.monotonic()
    try:
        first.start()  # starts the llama-server, -np 2
        upstream = first.env["BOXMAKER_UPSTREAM"]
        second = Stack(config_for(profile, direct_core, 1), upstream, None, profile)
        stacks.append(second)
        second.start()
        for s in stacks:
            s.wait_loopd()
        print(f"stacks up after {time.monotonic() - started:.0f} s; load {load()}", flush=True)
        results: list[dict[str, object]] = [{}, {}]
        lock = threading.Lock()
        names = (call_name, direct_name)
        threads = [
            threading.Thread(
                target=measure_way,
                args=(names[w], Run(s, io.StringIO()), w, args.runs, results[w], lock),
            )
            for w, s in enumerate(stacks)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for (name, core), r in zip(WAYS.items(), results, strict=True):
            if not r:
                print(f"{name}: did not finish (see above)")
                continue
            ok, took = r["ok"], r["took"]
            assert isinstance(ok, dict)
            assert isinstance(took, list)
            shown = ", ".join(f"{t} {ok[t]}/{args.runs}" for t in TASKS)
            print(f"{name}: [tools] core = {core}: {shown}; baseline {r['tokens']} tokens; "
                  f"{sum(took) / len(took):.0f} s per conversation "
                  f"({min(took):.0f} to {max(took):.0f})", flush=True)  # fmt: skip
        print(f"total {time.monotonic() - started:.0f} s; load after: {load()}")
    finally:
        for s in reversed(stacks):
            s.stop(keep=True)
        print(f"run folders kept: {', '.join(str(s.run) for s in stacks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
