"""The wait the after-turn save adds inside a tool loop, on the REAL llama-server (issue 29.10).

One llama-server (SmolLM2-135M, one slot of 4,096 tokens, --cache-ram 0, --slot-save-path), the
real cache keeper and slot gate of loopd's main process, in this process. A turn of `--rounds`
completions on one slot, as a tool loop makes them: each one holds the gate, is granted
(`before_grant`), extends the slot's prompt by a tool result's worth of tokens (a real
/completion), and is let go (`after_release`); the tool itself takes no time, so the next
completion asks for the gate at once. The save rule is forced due (`save_factor` 1, a slow
prompt rate), so every chance to save is taken:

- before: the after-turn save queued on every release (`turn_over` after each completion, what
  the keeper did before), so each next completion waits behind a save of the whole slot;
- after: queued once, after the turn's final frame (`turn_over` once).

The figures: the median over `--runs` of the turn's wall time, of the time its completions spent
waiting for the gate, and the saves made. `python -m bench.toolloop_save [--rounds 6] [--runs 3]`
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from boxmaker._toml import toml_dumps
from boxmaker.loopd.config import load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.selftest.run import open_keeper
from tests.support.loopd.cache import SYSTEM_MD, CacheStack

CTX = 4096
STEP = 300  # tokens a round adds: a tool result and the next answer


def _ignore(_event: object) -> None:
    pass


def one_turn(cs: CacheStack, rounds: int, per_release: bool, session: str) -> dict[str, float]:
    table = cs.stack.config_table(inference={"slots": [0]}, expect={"n_ctx": CTX, "total_slots": 1})
    table |= {
        "paths": {"home": str(cs.home)},
        "baseline": {"system": str(SYSTEM_MD)},
        "cache": {"slot_save": True, "min_tokens": 1, "idle_save_ms": 600_000, "save_factor": 1},
    }
    path = Path(cs.dir) / f"bench-{session}.toml"
    path.write_text(toml_dumps(table))
    config = load_config(path, env={})
    gate = SlotGate(8)
    keeper = open_keeper(config, gate, Client(config.inference).props, _ignore, _ignore)
    if keeper is None:
        raise SystemExit("bench toolloop_save: the server does not save slots")
    keeper.set_prompt_rate(50_000.0)  # 50 ms a token: a re-read always costs more than a save
    keeper.start()
    srv = cs.stack.server
    prompt: list[int] = []
    waited = 0.0
    saves_before = len(list(cs.saves.glob("*.bin")))
    started = time.monotonic()
    try:
        for r in range(rounds):
            asked = time.monotonic()
            with gate.hold(0, _ignore):
                waited += time.monotonic() - asked
                keeper.before_grant(0, session, 0)
                prompt += [(session.__hash__() + r * 7 + k) % 5000 + 100 for k in range(STEP)]
                body: dict[str, Any] = {
                    "prompt": prompt, "n_predict": 1, "cache_prompt": True, "id_slot": 0,
                }  # fmt: skip
                res = srv.call("POST", "/completion", body, timeout=600)
                if res.status != 200:
                    raise SystemExit(f"bench toolloop_save: /completion answered {res.status}")
                keeper.after_release(0, session, 0)
            if per_release or r == rounds - 1:
                keeper.turn_over(session)
        # the turn's last save done: the gate is free once the keeper has let it go
        asked = time.monotonic()
        with gate.hold(0, _ignore):
            tail = time.monotonic() - asked
        elapsed = time.monotonic() - started
    finally:
        keeper.drain()
    saves = len(list(cs.saves.glob("*.bin"))) - saves_before
    return {"elapsed": elapsed, "waited": waited, "tail": tail, "files": saves}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.toolloop_save")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with CacheStack(slots=1, ctx=CTX) as cs:
        got: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for run in range(args.runs):
            for per_release in (True, False):
                name = f"b{run}{'r' if per_release else 't'}"
                got[per_release].append(one_turn(cs, args.rounds, per_release, name))

    def med(per_release: bool, key: str) -> float:
        return statistics.median(x[key] for x in got[per_release])

    print(
        f"a tool loop of {args.rounds} completions on the real server (SmolLM2-135M, "
        f"{STEP} tokens a round, --cache-ram 0), the after-turn save forced due; "
        f"median of {args.runs}"
    )
    print("| save queued | turn wall time | waits for the gate inside the loop | ratio |")
    print("|---|---|---|---|")
    before_w, after_w = med(True, "waited"), med(False, "waited")
    print(
        f"| on every release (before) | {med(True, 'elapsed') * 1000:.0f} ms | "
        f"{before_w * 1000:.1f} ms | |"
    )
    ratio = before_w / after_w if after_w > 0 else float("inf")
    print(
        f"| once a turn (issue 29.10) | {med(False, 'elapsed') * 1000:.0f} ms | "
        f"{after_w * 1000:.1f} ms | {ratio:.0f}x less waiting |"
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
