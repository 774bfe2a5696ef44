"""`loopd serve` end to end: turn latency through the channel and a worker, spawn cost, relay rate.

A real `loopd serve` runs against the scripted fake llama-server (tests/support/serve.py),
which answers at once. Measured from a client on loop.sock:

- warm turn: the time from writing the `turn` frame to reading the final frame, for a turn of one
  completion on a session whose worker is running; beside it the same turn run in this process
  with `run_turn` (same fake, same kind of session, same fsyncs). The difference is what the
  channel, the worker's pipes and the shared slot gate add: the overhead (aim: < 2 ms).
- spawn turn: the same turn when the session's worker has exited (worker_idle_ms passed), so a
  worker must start and resume the log; minus the warm median, the worker's start (aim: 150 ms).
  Twice: with the spare worker loopd keeps started ahead (the default), and with none, where the
  turn waits for a whole Python process to start.
- relay: one turn whose completion streams many `content` events; events per second as the client
  reads them (fake -> worker -> main process -> client), and the main process's own CPU work per
  event timed in this process: decode the pipe frame and encode the channel frame (what it did
  before issue 20) beside passing the bytes read on (what it does now). Aim: 50,000/s.

- memory: the RSS and PSS of each of `--memory` idle workers (what `[channel] max_workers` bounds).

`python -m bench.daemon [--turns 200] [--spawns 10] [--events 20000] [--memory 20]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from boxmaker.loopd.config import load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.loopd.tools.registry import CORE_SCHEMAS
from boxmaker.loopd.turn.runner import run_turn
from boxmaker.loopd.workers.pipes import Relayed, RelayReader
from boxmaker.loopd.workers.wire import PIPE_KINDS
from boxmaker.proto import ContentEvent, TurnDone, channel_frame
from boxmaker.proto.frame import NEED_DATA, Frame, FrameDecoder, encode_frame
from boxmaker.session.baseline import Baseline
from boxmaker.session.store import SessionStore
from tests.support.fake_tools import FakeTools
from tests.support.procs import wait_for
from tests.support.recorded import Recorded
from tests.support.replies import Reply, sse_reply
from tests.support.serve import ServeEnv, connect, read_frames, serve_env, turn, turn_bytes
from tests.support.turn import completion_events, say


def timed_turn(sock_path: Path, session: str, content: str) -> float:
    with connect(sock_path) as sock:
        started = time.perf_counter()
        sock.sendall(turn_bytes(session, content, True))
        frames = read_frames(sock)
        took = time.perf_counter() - started
    if not isinstance(frames[-1], TurnDone):
        raise SystemExit(f"bench daemon: a turn failed: {frames[-1]}")
    return took


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


def bench_warm(env: ServeEnv, turns: int) -> float:
    turn(env.socket, "warm", "start", resume=False)
    for i in range(10):  # warm the worker, the caches, the fake's threads
        timed_turn(env.socket, "warm", f"w{i}")
    times = [timed_turn(env.socket, "warm", f"turn {i}") for i in range(turns)]
    median = statistics.median(times)
    # The same turns in this process: run_turn against the same fake, no channel, no worker.
    config = load_config(env.write_config())
    client = Client(config.inference)
    store = SessionStore(env.folder / "direct-home")
    with store.create(
        "direct",
        Baseline("You are a test.\n", CORE_SCHEMAS),
        slot=0,
        time="2026-12-01T00:00:00.000Z",
    ) as log:
        direct = []
        for i in range(turns):
            started = time.perf_counter()
            run_turn(log, f"turn {i}", client=client, port=FakeTools(), config=config.loop)
            direct.append(time.perf_counter() - started)
    direct_median = statistics.median(direct)
    rate = f"{1 / median:7.0f} turns/s one after another"
    print(f"  warm turn via loopd      median {ms(median)}  ({rate})")
    print(f"  same turn in-process     median {ms(direct_median)}")
    overhead = ms(median - direct_median)
    print(f"  overhead (channel, worker pipes, shared gate)  {overhead}   aim < 2 ms")
    return median


def bench_spawn(env: ServeEnv, spawns: int, warm: float, how: str) -> None:
    times = []
    spare = int(how == "spare")
    for i in range(spawns):
        session = f"spawn-{spare}-{i}"
        turn(env.socket, session, "start", resume=False)
        # worker_idle_ms is short here: wait until this session's worker has gone.
        wait_for(lambda: len(_workers(env)) <= spare, "the idle workers to exit", 10.0)
        times.append(timed_turn(env.socket, session, "after idle"))
    median = statistics.median(times)
    cost = ms(median - warm)
    print(f"  first turn, {how:8} median {ms(median)}  worker start {cost}   aim < 150 ms")


def _workers(env: ServeEnv) -> list[int]:
    pid = env.daemons[-1].pid
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return [p for p in found if _state(p) != "Z"]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]
    except (FileNotFoundError, ProcessLookupError, IndexError):  # gone, or going as we read
        return "Z"


def streaming(events: int) -> Any:
    def handler(request: Recorded) -> Reply:
        chunks = completion_events(say("x"), 0, 100, events)
        piece = chunks[1]  # the one content chunk, sent `events` times
        return sse_reply([chunks[0], *([piece] * events), chunks[-1]])

    return handler


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used (utime, stime in /proc/<pid>/stat)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def bench_relay(env: ServeEnv, events: int) -> None:
    turn(env.socket, "relay", "start", resume=False)
    env.fake.on("POST", CHAT_PATH, streaming(events))
    loopd, workers = [env.daemons[-1].pid], _workers(env)
    cpu = (_cpu_s(loopd), _cpu_s(workers))
    with connect(env.socket) as sock:
        sock.sendall(turn_bytes("relay", "stream", True))
        decoder = FrameDecoder()
        seen = 0
        first = last = 0.0
        while True:
            frame = decoder.next_frame()
            if frame is NEED_DATA:
                decoder.receive_data(sock.recv(262_144))
                continue
            assert isinstance(frame, Frame), frame  # the turn's frames end with a final one
            if frame.kind == "turn_event":
                seen += 1
                if seen == 1:
                    first = time.perf_counter()
                last = time.perf_counter()
            if frame.final:
                break
    rate = (seen - 1) / (last - first) if last > first else float("inf")
    path = "fake -> worker -> main -> client"
    print(f"  relay end to end         {seen} events, {rate:9.0f} events/s ({path})")
    # CPU per event, a figure a loaded machine disturbs less than the rate (the fake's excluded).
    main_us = (_cpu_s(loopd) - cpu[0]) / seen * 1e6
    worker_us = (_cpu_s(workers) - cpu[1]) / seen * 1e6
    print(f"  relay CPU per event      main process {main_us:5.2f} us, worker {worker_us:5.2f} us")
    # The main process's own work per event: before issue 20 it decoded the worker's frame and
    # encoded the client's; now its RelayReader passes the bytes read on (pipes.py). Both here.
    data = channel_frame(ContentEvent("x")) * 50_000
    started = time.perf_counter()
    decoder = FrameDecoder(PIPE_KINDS)
    decoder.receive_data(data)
    n = 0
    while isinstance(frame := decoder.next_frame(), Frame):
        encode_frame(frame.kind, frame.body, frame.final, PIPE_KINDS)
        n += 1
    decoded = (time.perf_counter() - started) / n
    with tempfile.TemporaryFile() as f:  # a file: os.read gives its bytes, then EOF
        f.write(data)
        f.seek(0)
        reader, n = RelayReader(f.fileno()), 0
        started = time.perf_counter()
        while isinstance(reader.next(), Relayed):
            n += 1
        relayed = (time.perf_counter() - started) / n
    for how, per in (("decode + encode", decoded), ("relayed bytes", relayed)):
        print(f"  main per event, {how:15} {per * 1e6:6.2f} us  ({1 / per:9.0f} events/s of CPU)")
    print(f"  relayed bytes / decode + encode: {relayed / decoded:.2f} of the CPU per event")


def _kib(pid: int, path: str, key: str) -> int:
    for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise SystemExit(f"bench daemon: no {key} in /proc/{pid}/{path}")


def bench_memory(env: ServeEnv, sessions: int) -> None:
    """What each worker costs: RSS and PSS (its share of pages shared with the others) of the
    workers of `sessions` idle sessions, and loopd's own RSS before and after."""
    loopd = env.daemons[-1].pid
    before = _kib(loopd, "status", "VmRSS")
    for i in range(sessions):
        turn(env.socket, f"mem{i}", "hi", resume=False)
    pids = _workers(env)
    rss = statistics.median(_kib(p, "status", "VmRSS") for p in pids) / 1024
    pss = statistics.median(_kib(p, "smaps_rollup", "Pss") for p in pids) / 1024
    after = _kib(loopd, "status", "VmRSS") / 1024
    print(
        f"  memory per worker        {len(pids)} workers: median RSS {rss:5.1f} MB, PSS "
        f"{pss:5.1f} MB; loopd RSS {before / 1024:5.1f} MB before, {after:5.1f} MB after"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.daemon", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--turns", type=int, default=200, help="warm turns to time")
    parser.add_argument("--spawns", type=int, default=10, help="turns that start a worker")
    parser.add_argument("--events", type=int, default=20_000, help="events in the relay turn")
    parser.add_argument("--memory", type=int, default=20, help="sessions for the memory figure")
    args = parser.parse_args(argv if argv is not None else [])
    print("bench daemon: loopd serve against the fake llama-server (answers at once)")
    with serve_env() as env:
        env.start()
        warm = bench_warm(env, args.turns)
        bench_relay(env, args.events)
    for how, spare in (("spare", True), ("no spare", False)):
        with serve_env() as env:
            env.start(worker_idle_ms=50, spare_worker=spare)
            bench_spawn(env, args.spawns, warm, how)
    with serve_env() as env:
        env.start(spare_worker=False, max_workers=args.memory)
        bench_memory(env, args.memory)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
