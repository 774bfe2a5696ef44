"""Slot save/restore on the REAL llama-server and the small model (issue 14).

One llama-server (SmolLM2-135M, one slot of 4,096 tokens, --cache-ram 0, --slot-save-path in a
temporary folder). For histories of 500, 1,000 and 2,000 tokens:

- reread: the slot erased, then the history plus 32 new tokens sent: the whole prompt is read
  (what a session pays when its cache is gone and nothing restores it);
- save: the history in the slot saved to a file: its time and size;
- restore + new: the slot erased, the file restored, then the same request: the restore's time
  plus the prompt time of what the cache did not hold (the new tokens).

Each figure is the median of `--runs` (3). Per 1,000 tokens: save and restore time, file size.
The break-even is where restore + new equals reread; a save is paid once for each later restore.

`python -m bench.slotcache [--runs 3]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from tests.support.llama import LlamaServer

HISTORIES = (500, 1000, 2000)
NEW_TOKENS = 32
CTX = 4096


def words(n: int, salt: str) -> str:
    """About `n` tokens of text no other call shares beyond its first word."""
    return " ".join(f"{salt}{k % 97}x{k // 97}" for k in range(n // 3))


def post(srv: LlamaServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    res = srv.call("POST", path, body, timeout=600)
    if res.status != 200:
        raise SystemExit(f"bench slotcache: {path} answered {res.status}: {res.content()[:200]!r}")
    obj = res.json()
    assert isinstance(obj, dict)
    return obj


def tokens(srv: LlamaServer, text: str) -> list[int]:
    found = post(srv, "/tokenize", {"content": text})["tokens"]
    assert isinstance(found, list)
    return found


def complete(srv: LlamaServer, prompt: list[int]) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": 1, "cache_prompt": True, "id_slot": 0}
    timings = post(srv, "/completion", body)["timings"]
    assert isinstance(timings, dict)
    return timings


def history(srv: LlamaServer, n: int, salt: str) -> list[int]:
    return tokens(srv, words(n * 2, salt))[:n]


def one_run(srv: LlamaServer, n: int, run: int) -> dict[str, float]:
    hist = history(srv, n, f"h{n}r{run}")
    new = tokens(srv, words(NEW_TOKENS * 2, f"n{n}r{run}"))[:NEW_TOKENS]
    post(srv, "/slots/0?action=erase", {})
    reread = complete(srv, hist + new)["prompt_ms"]
    post(srv, "/slots/0?action=erase", {})
    complete(srv, hist)  # the history in the slot, as a session leaves it
    saved = post(srv, "/slots/0?action=save", {"filename": f"bench-{n}.bin"})
    post(srv, "/slots/0?action=erase", {})
    restored = post(srv, "/slots/0?action=restore", {"filename": f"bench-{n}.bin"})
    after = complete(srv, hist + new)
    return {
        "reread_ms": reread,
        "save_ms": saved["timings"]["save_ms"],
        "bytes": saved["n_written"],
        "saved_tokens": saved["n_saved"],
        "restore_ms": restored["timings"]["restore_ms"],
        "new_ms": after["prompt_ms"],
        "cache_n": after["cache_n"],
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.slotcache")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bench-slots-"))
    flags = ("--slot-save-path", str(folder), "--cache-ram", "0")
    print("slot save/restore (SmolLM2-135M, -t 1, one slot of 4,096 tokens, --cache-ram 0)")
    print(
        f"{'history':>8} {'reread':>10} {'save':>9} {'file':>9} {'restore':>9} "
        f"{'+new':>9} {'restore+new':>12} {'saves':>8}"
    )
    per_k: list[tuple[float, float, float]] = []
    with LlamaServer(slots=1, ctx=CTX, extra_args=flags) as srv:
        for n in HISTORIES:
            runs = [one_run(srv, n, r) for r in range(args.runs)]

            def med(key: str, runs: list[dict[str, float]] = runs) -> float:
                return statistics.median(r[key] for r in runs)

            k = med("saved_tokens") / 1000
            per_k.append((med("save_ms") / k, med("restore_ms") / k, med("bytes") / k))
            both = med("restore_ms") + med("new_ms")
            print(
                f"{n:>8} {med('reread_ms'):>7.1f} ms {med('save_ms'):>6.1f} ms "
                f"{med('bytes') / 1e6:>6.1f} MB {med('restore_ms'):>6.1f} ms "
                f"{med('new_ms'):>6.1f} ms {both:>9.1f} ms {med('reread_ms') - both:>5.0f} ms"
            )
            if min(r["cache_n"] for r in runs) < n - 1:
                raise SystemExit(f"bench slotcache: a restore of {n} tokens did not hit the cache")
    save_k, restore_k, bytes_k = (statistics.median(v) for v in zip(*per_k, strict=True))
    print(
        f"per 1,000 tokens: save {save_k:.1f} ms, restore {restore_k:.1f} ms, "
        f"file {bytes_k / 1e6:.1f} MB ({bytes_k / 1000 / 1024:.1f} KiB per token)"
    )
    print("saves: reread - (restore + new), the prompt time one restore saves")
