"""Turns per minute with 1, 2 and 4 concurrent sessions on the REAL 2-slot server (issue 19).

One llama-server (SmolLM2-135M, `-np 2`, --cache-ram 0, --slot-save-path), inferproxy and
`loopd serve` with `[cache] slot_save` on, run twice in one go: `[inference] slot_choice =
"first"` (every session on slot 0, the behaviour before issue 19) and "spread" (a new session on
the slot with the fewest recent sessions). Each of N sessions, in its own thread, takes a first
turn (not timed: it creates the session and reads the system prompt into a cold slot), then all
wait for each other, then each sends `--turns` turns one after another (each answer at most 48
tokens); the figure is those turns over the wall time from the barrier to the last, per minute.

`python -m bench.slots [--turns 3]`
"""

from __future__ import annotations

import argparse
import threading
import time

from tests.support.loopd.cache import CacheStack

CONCURRENT = (1, 2, 4)
SAID = ("Say hello.", "Name a colour.", "Name a fruit.", "Name a tree.", "Name a river.")


def run(choice: str, sessions: int, turns: int) -> float:
    """Turns per minute for `sessions` sessions of `turns` turns each."""
    with CacheStack(
        slots=2, inference={"slot_choice": choice}, cache={"idle_save_ms": 60_000}
    ) as cs:
        cs.start_loopd()
        failed: list[BaseException] = []

        def talk(name: str) -> None:
            try:
                for i in range(turns):
                    cs.turn(name, SAID[i % len(SAID)], resume=bool(i))
            except BaseException as exc:
                failed.append(exc)

        threads = [threading.Thread(target=talk, args=(f"b{k}",)) for k in range(sessions)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        if failed:
            raise SystemExit(f"bench slots: a turn failed: {failed[0]!r}")
    return sessions * turns * 60 / elapsed


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.slots")
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args(argv)
    print("turns per minute, 2 slots (SmolLM2-135M, --cache-ram 0, slot_save on, 48 tokens max)")
    print("| sessions at once | all on slot 0 (before) | spread (issue 19) | ratio |")
    print("|---|---|---|---|")
    for n in CONCURRENT:
        before = run("first", n, args.turns)
        after = run("spread", n, args.turns)
        print(f"| {n} | {before:.1f} | {after:.1f} | {after / before:.2f}x |", flush=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
