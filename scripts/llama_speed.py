"""Prompt and generation speed of llama-server binaries, side by side on the small model.

    python scripts/llama_speed.py MODEL BINARY [BINARY ...] [--rounds N]

Starts each binary in turn (one thread, one slot, as the tests do), sends the same long prompt with
the prompt cache off, and reads llama-server's own timings. Rounds alternate between the binaries,
so a machine that gets busier mid-run slows them alike; prints the median of each. Used to choose
the build flags of scripts/build_llama_server.sh (README: "The llama-server build").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smoke_llama_server import free_port, request

PROMPT = " ".join(f"Item {i} is a word about the sea and the sky." for i in range(40))


def measure(binary: str, model: str) -> tuple[float, float]:
    port = free_port()
    cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "2048"]
    cmd += ["-np", "1", "-t", "1", "--offline", "--log-colors", "off"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if request(port, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{binary} did not start (exit {proc.poll()})")
            time.sleep(0.1)
        body = {"prompt": PROMPT, "n_predict": 128, "cache_prompt": False, "ignore_eos": True}
        status, raw = request(port, "POST", "/completion", body)
        if status != 200:
            raise SystemExit(f"{binary}: /completion answered HTTP {status}")
        timings = json.loads(raw)["timings"]
        return float(timings["prompt_per_second"]), float(timings["predicted_per_second"])
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {b: [] for b in args.binaries}
    for _ in range(args.rounds):
        for binary in args.binaries:
            results[binary].append(measure(binary, args.model))
    for binary, runs in results.items():
        prompt = statistics.median(r[0] for r in runs)
        gen = statistics.median(r[1] for r in runs)
        print(f"{prompt:8.1f} prompt tok/s  {gen:7.1f} generation tok/s  {binary}")


if __name__ == "__main__":
    main()
