"""brokerd: the time a tool call through brokerd adds over the in-process FakeTools.

A real `python -m boxmaker.brokerd serve` (tests/support/brokerd/rig.py: its own workspace,
grants and decision log) and loopd's `BrokerPort`, one connection per call as the worker makes
them. Timed in this process, p50 and p99 of N calls each:

- FakeTools `echo` in process: the M2b baseline, no I/O at all;
- BrokerPort `clock`: connect, two frames, and brokerd's log (request, decision, result: each
  line written and fsync'd before brokerd goes on);
- BrokerPort `read_file` of a small file: the same plus the grant check and openat2.

The added time is the BrokerPort figure minus FakeTools' (aim: < 2 ms p50). The log's fsyncs
are most of it on a real disk; the line says which filesystem the log was on.

`python -m bench.broker [--calls 2000]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess

from boxmaker.loopd.tools.port import BrokerPort
from boxmaker.proto import ToolRequest
from tests.support.brokerd.rig import Rig, remove, short_base
from tests.support.fake_tools import FakeTools

from ._timing import times


def p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def line(name: str, values: list[float], base: list[float] | None = None) -> str:
    p50, p99 = statistics.median(values), p(values, 0.99)
    text = f"  {name:<28} p50 {p50 * 1e3:7.3f} ms  p99 {p99 * 1e3:7.3f} ms"
    if base is not None:
        added = p50 - statistics.median(base)
        text += f"  added p50 {added * 1e3:6.3f} ms ({'under' if added < 0.002 else 'OVER'} 2 ms)"
    return text


def filesystem(path: str) -> str:
    try:
        out = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.broker")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    base = short_base()
    rig = Rig(base)
    try:
        rig.start()
        (rig.workspace / "small.txt").write_text("hello\n" * 10)
        fake = FakeTools()
        echo = ToolRequest(1, "echo", '{"text": "hello"}')
        port = BrokerPort(rig.socket, 10.0, lambda *_: None)
        clock = ToolRequest(1, "clock", "{}")
        read = ToolRequest(1, "read_file", '{"path": "small.txt"}')
        assert port.call(read).content.startswith("hello")
        n = args.calls
        in_process = times(lambda: fake.call(echo), n, warm=min(50, n))
        via_clock = times(lambda: port.call(clock), n, warm=min(50, n))
        via_read = times(lambda: port.call(read), n, warm=min(50, n))
        print(f"brokerd: {n} calls each; the decision log on {filesystem(str(rig.log))} "
              f"({os.path.dirname(rig.log)})")  # fmt: skip
        print(line("FakeTools echo (in process)", in_process))
        print(line("BrokerPort clock", via_clock, in_process))
        print(line("BrokerPort read_file", via_read, in_process))
    finally:
        rig.stop()
        remove(base)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
