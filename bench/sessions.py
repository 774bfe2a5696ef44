"""Session resume and durable append, on this machine's disk.

Resume is what a restarted worker does before its first request: `SessionStore.open` (read the
whole log, check every line, the seq/prev chain and the baseline's hash) and then replay
(`request_messages`). Logs of 1,000, 10,000 and 100,000 records are written once, a realistic
mix (a user message, an assistant asking for the clock, its usage, the tool result, the answer
and its usage, about 240 bytes a line), then each is resumed several times; the table shows the
best and median times, per record and per MB, and where the time goes (read, all the checks, the
line checks among them, replay). The generic `verify_log` is timed once beside it, as the path
the fast check replaces.

Append is one record through `SessionLog.append`: one write of the whole line, then fsync. Its
latency percentiles are set beside the same write without the fsync.

`python -m bench.sessions [--sizes 1000,10000,100000] [--repeat 5] [--appends 300] [--dir D]`
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from boxmaker.proto import (
    Assistant,
    ResultClass,
    ToolCall,
    ToolResult,
    ToolSchema,
    Usage,
    User,
    encode_line,
    next_prev,
    verify_log,
)
from boxmaker.proto.log import LogRecord
from boxmaker.proto.log_fast import verify_records
from boxmaker.session.baseline import Baseline
from boxmaker.session.check import check_session
from boxmaker.session.files import read_bounded
from boxmaker.session.paths import BASELINE_NAME, LOG_MAX_BYTES
from boxmaker.session.replay import request_messages
from boxmaker.session.store import SessionStore

T0 = "2026-11-30T03:48:37.123Z"
BASELINE = Baseline(
    "You are Boxmaker, a personal agent. Be direct and brief.",
    (ToolSchema("clock", "Returns the current time.", {"type": "object", "properties": {}}),),
)


def _time(i: int) -> str:
    s = i // 1000
    day, hh, mm, ss = 1 + s // 86400 % 28, s // 3600 % 24, s // 60 % 60, s % 60
    return f"2026-11-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}.{i % 1000:03d}Z"


def _record(i: int) -> LogRecord:
    t = _time(i)
    match i % 6:
        case 1:
            return User(t, f"What time is it in Paris now? (question {i})")
        case 2:
            return Assistant(
                t,
                None,
                "The user wants the time. Call the clock.",
                (ToolCall(f"call_{i}", "clock", "{}"),),
            )
        case 3 | 0:
            return Usage(t, 812 + i % 97, 40, 20, 9, False)
        case 4:
            return ToolResult(
                t, i, f"call_{i - 2}", "2026-11-30T03:48:39Z", ResultClass.PUBLIC, False, False
            )
        case _:
            return Assistant(t, "It is 04:48 in Paris, one hour ahead of UTC in winter.", None, ())


def make_log(home: Path, session: str, n: int) -> Path:
    """A session of n records (session_start + n - 1), written as the store would write it."""
    with SessionStore(home).create(session, BASELINE, slot=0, time=T0) as log:
        path = log.log_path
    first = path.read_bytes()
    lines, prev = [first], next_prev(first)
    for i in range(1, n):
        line = encode_line(_record(i), i, prev)
        lines.append(line)
        prev = next_prev(line)
    path.write_bytes(b"".join(lines))
    return path


def resume(home: Path, session: str) -> float:
    """Seconds to open the session and build its next request's messages. What they built is
    freed after the clock stops: a worker keeps it, so freeing it is no part of a resume."""
    t0 = time.perf_counter()
    log = SessionStore(home).open(session)
    msgs = request_messages(log.baseline, log.records)
    took = time.perf_counter() - t0
    log.close()
    del msgs, log
    return took


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def breakdown(home: Path, session: str) -> dict[str, float]:
    """One resume's parts, timed one by one: read, check (of which the line checks), replay."""
    folder = home / "sessions" / session
    log_path, base_path = folder / "0.jsonl", folder / BASELINE_NAME
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    fd = os.open(log_path, os.O_RDONLY)
    data = read_bounded(fd, LOG_MAX_BYTES, str(log_path))
    os.close(fd)
    base = base_path.read_bytes()
    out["read"] = time.perf_counter() - t0
    out["lines"] = _timed(lambda: verify_records(data))
    t0 = time.perf_counter()
    checked = check_session(session, str(log_path), data, str(base_path), base)
    out["check"] = time.perf_counter() - t0
    out["replay"] = _timed(lambda: request_messages(checked.baseline, checked.records))
    return out


def bench_resume(home: Path, sizes: list[int], repeat: int) -> None:
    print("resume: open (read + check every line, the chain, the baseline) + replay")
    print("  parts, each the best of the runs: read the files; check = all of open's checks, of")
    print(
        "  which lines = the line checks (parse, types, seq/prev chain); replay = request_messages;"
    )
    print("  verify_log = the generic line check, for comparison with lines")
    head: tuple[str, ...] = ("records", "MB", "best ms", "median ms", "us/record", "MB/s")
    head += ("read", "check", "lines", "replay", "verify_log")
    print("  " + " ".join(f"{h:>10}" for h in head))
    for n in sizes:
        session = f"r{n}"
        path = make_log(home, session, n)
        mb = path.stat().st_size / 1e6
        resume(home, session)  # warm the page cache and the caches of the checks
        times = [resume(home, session) for _ in range(repeat)]
        parts = [breakdown(home, session) for _ in range(repeat)]
        part = {k: min(p[k] for p in parts) * 1e3 for k in parts[0]}
        data = path.read_bytes()
        generic = _timed(lambda d=data: verify_log(d)) * 1e3  # type: ignore[misc]
        best, med = min(times), statistics.median(times)
        row = (
            f"{n:>10,}",
            f"{mb:>10.1f}",
            f"{best * 1e3:>10.1f}",
            f"{med * 1e3:>10.1f}",
            f"{best / n * 1e6:>10.2f}",
            f"{mb / best:>10.1f}",
            *(f"{part[k]:>10.1f}" for k in ("read", "check", "lines", "replay")),
            f"{generic:>10.1f}",
        )
        print("  " + " ".join(row))


def _percentiles(xs: list[float]) -> str:
    xs = sorted(xs)

    def ms(q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3

    return f"p50 {ms(0.5):7.3f}  p90 {ms(0.9):7.3f}  p99 {ms(0.99):7.3f}  max {ms(1):7.3f} ms"


def bench_append(home: Path, appends: int) -> None:
    print(f"\nappend: one record (~240 bytes), {appends} times")
    durable: list[float] = []
    with SessionStore(home).create("append", BASELINE, slot=0, time=T0) as log:
        for i in range(1, appends + 1):
            record = _record(i)
            t0 = time.perf_counter()
            log.append(record)
            durable.append(time.perf_counter() - t0)
        line = encode_line(_record(5), 5, "0" * 64)
    bare: list[float] = []
    fd = os.open(home / "bare.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(appends):
            t0 = time.perf_counter()
            os.write(fd, line)
            bare.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    print(f"  write + fsync (SessionLog.append)  {_percentiles(durable)}")
    print(f"  write alone (no fsync)             {_percentiles(bare)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sessions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="log sizes in records")
    parser.add_argument("--repeat", type=int, default=5, help="resumes per size")
    parser.add_argument("--appends", type=int, default=300, help="durable appends to time")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp folder)")
    args = parser.parse_args(argv if argv is not None else [])
    home = Path(tempfile.mkdtemp(prefix="bench-sessions-", dir=args.dir))
    try:
        print(f"bench sessions: in {home}")
        bench_resume(home, [int(s) for s in args.sizes.split(",")], args.repeat)
        bench_append(home, args.appends)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
