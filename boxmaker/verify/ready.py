"""`make run`'s readiness wait (scripts/run.sh): until llama-server answers /health and
inferproxy's and loopd's sockets exist (loopd binds its socket once its self-test has passed).

It follows the stack's own progress and says, every few seconds, what it waits for: llama-server
not listening yet, or its /health saying it is loading the model (a 1.1 GB model on two busy
cores takes minutes), or loopd's self-test. It ends at once, in one line with the log's last
lines, when supervisord gives up on a program (programs.gave_up) or when llama-server exits
after it had started (supervisord restarts it, and it would load and die again). The bound is
the profile's `[model] start_s` (BOXMAKER_START_S overrides it).

    python -m boxmaker.verify.ready <start_s> <program>...
        (BOXMAKER_RUN, BOXMAKER_UPSTREAM, BOXMAKER_SOCKET set as run.sh sets them)
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from boxmaker._pid import alive
from boxmaker.proto import brokerd_state
from boxmaker.verify.programs import gave_up, states, tail

POLL_S = 0.5
SAY_EVERY_S = 5.0


def health(host: str, port: int) -> tuple[bool, str]:
    """(ready, what /health says): 200 is ready; 503 while the model loads, with its message."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=2)
        conn.request("GET", "/health")
        resp = conn.getresponse()
        body = resp.read(4096)
    except OSError as e:
        return False, f"not listening yet ({e})"
    if resp.status == 200:
        return True, "ready"
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body.decode("utf-8", "replace").strip()[:80]
    return False, f"/health answers {resp.status}: {message!r}"


def restarted(run: Path, program: str, seen: list[int]) -> str | None:
    """One line when `program` ran (its pid noted in `seen`) and is no longer that process."""
    for info in states(run):
        if info.get("name") != program:
            continue
        pid, state = int(info.get("pid") or 0), info.get("statename", "?")
        if state == "RUNNING" and pid and not seen:
            seen.append(pid)
        elif seen and (state != "RUNNING" or pid != seen[0]):
            log = info.get("stdout_logfile") or f"{run}/{program}.log"
            last = " | ".join(tail(log, 4)) or "(empty)"
            return (f"{program} exited after it had started (now {state}; supervisord starts it "
                    f"again, and it would do the same); last lines of {log}: {last}")  # fmt: skip
    return None


def brokerd(run: Path, state_file: str) -> tuple[bool, str | None]:
    """(ready, the line to fail with): brokerd's own word on its start (proto/brokerd_state.py),
    this brokerd's only (run.sh removes an older one first). A failed start (a typo in the
    grants) ends the wait at once: supervisord would restart it for ever."""
    try:
        with open(state_file, "rb") as f:
            state = brokerd_state.decode(f.read(brokerd_state.MAX_BYTES + 1))
    except OSError:
        return False, None
    if state is None:
        return False, None
    if (why := brokerd_state.failure(state)) is not None:
        log = f"{run}/brokerd.err.log"
        last = [ln for ln in tail(log, 3) if why not in ln]
        more = f"; last lines of {log}: {' | '.join(last)}" if last else f" (see {log})"
        return False, f"cannot start: brokerd: {why}{more}"
    return state["state"] == brokerd_state.READY and alive(state.get("pid")), None


def wait(
    run: Path, programs: list[str], upstream: str, loop_sock: str, bound: float,
    say: Callable[[str], None], now: Callable[[], float] = time.monotonic,
    brokerd_state_file: str | None = None,
) -> str | None:  # fmt: skip
    """None once ready; else the line to fail with. `brokerd_state_file`: wait for brokerd too."""
    host, _, port = upstream.rpartition(":")
    socks = [str(run / "infer.sock"), loop_sock]
    local = "llama-server" in programs
    started = said = now()
    seen: list[int] = []
    state = "no answer yet"
    missing = socks
    tools_ready = brokerd_state_file is None
    while now() - started < bound:
        if (line := gave_up(run, programs)) is not None:
            return f"cannot start: {line}"
        if local and (line := restarted(run, "llama-server", seen)) is not None:
            return f"cannot start: {line}"
        if brokerd_state_file is not None:
            tools_ready, line = brokerd(run, brokerd_state_file)
            if line is not None:
                return line
        ready, state = health(host, int(port))
        missing = [os.path.basename(p) for p in socks if not os.path.exists(p)]
        if not tools_ready:
            missing.append("brokerd")
        if ready and not missing:
            return None
        if now() - said >= SAY_EVERY_S:
            said = now()
            waits = [] if ready else [f"llama-server at {upstream}: {state}"]
            waits += [WHAT.get(name, f"{name} (loopd binds it once its self-test passes)")
                      for name in missing]  # fmt: skip
            say(f"waiting {said - started:.0f} s of {bound:g} for " + "; ".join(waits))
        time.sleep(POLL_S)
    return (f"not ready after {bound:g} s (llama-server at {upstream}: {state}; still missing: "
            f"{', '.join(missing) or 'nothing'}); see the logs in {run}/; a slower machine can "
            "wait longer with BOXMAKER_START_S=<seconds>")  # fmt: skip


WHAT = {
    "infer.sock": "infer.sock (inferproxy's)",
    "brokerd": "brokerd (it says ready once it listens with its grants read)",
}


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C: run.sh's trap says so in one line and stops the stack
        return 130


def _main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m boxmaker.verify.ready <start_s> <program>...", file=sys.stderr)
        return 2
    try:
        bound = float(argv[0])
    except ValueError:
        print(f"run: start_s {argv[0]!r} is not a number of seconds", file=sys.stderr)
        return 2
    env = os.environ
    line = wait(Path(env["BOXMAKER_RUN"]), argv[1:], env["BOXMAKER_UPSTREAM"],
                env["BOXMAKER_SOCKET"], bound, lambda s: print(f"run: {s}", file=sys.stderr,
                                                                flush=True),
                brokerd_state_file=env.get("BOXMAKER_BROKERD_STATE") if "brokerd" in argv[1:]
                else None)  # fmt: skip
    if line is None:
        return 0
    print(f"run: {line}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
