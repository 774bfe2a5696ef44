"""The timing helpers the brokerd-side benches share: repeated calls, percentiles, one line a
figure, the ratio of medians (these machines are shared: a ratio in one run is the figure)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def times(fn: Callable[[], object], n: int, warm: int = 0) -> list[float]:
    """Seconds each of `n` calls took, after `warm` untimed ones."""
    for _ in range(warm):
        fn()
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def line(name: str, values: list[float], width: int = 38) -> None:
    p50, p99 = statistics.median(values), percentile(values, 99)
    print(f"  {name:{width}} p50 {p50 * 1000:7.2f} ms   p99 {p99 * 1000:7.2f} ms")


def ratio(name: str, ours: list[float], theirs: list[float], width: int = 38) -> None:
    value = statistics.median(ours) / statistics.median(theirs)
    print(f"  {'ratio of medians (' + name + ')':{width}} {value:.2f}x")
