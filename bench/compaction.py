"""Compaction on the REAL llama-server (issue 21): Boxmaker's against the usual cold way.

One llama-server (SmolLM2-135M, -t 1, one slot of 2,048 tokens, --cache-ram 0). A conversation
is built once, turn by turn through `run_turn` (compaction off), until it holds about 70% of the
slot. Then, `--runs` times (3), from a copy of that session with the slot holding it (as after
its last turn):

- boxmaker: `/compact` (`Compactor.run`): the summary request extends the conversation's last
  request, so the server reads only the instruction; the switch; the pre-warm of the new epoch's
  prefix; then the owner's next message as a turn;
- cold, as other agents do: the same conversation as a new prompt (a summariser's system
  message and the transcript as one user message) with the same instruction, then the next
  message in a new conversation made of the system prompt, the summary and the message.

Shown for each: the prompt tokens the server read (`prompt_n`, what was not in the cache) and the
wall time, of the compaction and of the first owner turn after it (medians of the runs), and the
ratios cold / boxmaker.

`--soak N` runs instead N scripted owner turns of one session on the same slot, compaction on,
and prints the session_full answers, the CacheLoss records (over every epoch), whether every
epoch verifies, the epoch count and the time of each switch (the issue's soak: 300 turns, about
ten minutes here).

`python -m bench.compaction [--runs 3] [--soak N]`
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from boxmaker.loopd.llama.types import ChatRequest
from boxmaker.loopd.tools.registry import CORE_SCHEMAS
from boxmaker.loopd.turn.compact import INSTRUCTION
from boxmaker.loopd.turn.runner import run_compaction
from boxmaker.proto import (
    CacheLoss,
    CompactedEvent,
    ErrorCode,
    SystemMessage,
    TurnDone,
    UserMessage,
    WireError,
)
from boxmaker.session import epoch_files
from boxmaker.session.baseline import assemble_baseline
from boxmaker.session.replay import request_messages
from boxmaker.session.verify import verify_session
from tests.support.loopd.real_compact import CTX, SYSTEM_MD, CompactStack, owner_text

FILL = 0.7  # of the slot, where the conversation stops growing
NEXT = "Thanks. What was my budget again, and when is the meeting?"
SUMMARISER = "You summarise conversations for an assistant that will continue them."


def drop(_event: object) -> None:
    pass


def build(cs: CompactStack) -> int:
    """The conversation, session `base`: turns until it fills FILL of the slot. Returns its
    size in tokens (the last completion's total)."""
    cs.compact["enabled"] = False
    chat = cs.chat("base")
    cs.compact["enabled"] = True
    total = 0
    for i in range(200):
        out = chat.say(owner_text(i))
        if not isinstance(out, TurnDone):
            raise SystemExit(f"bench compaction: turn {i} failed: {out}")
        u = out.usage
        total = u.cache_n + u.prompt_n + u.predicted_n
        if total >= FILL * CTX:
            break
    chat.log.close()
    return total


def one_run(cs: CompactStack, base_home: Path, run: int) -> dict[str, tuple[int, float]]:
    cs.home = base_home.parent / f"run{run}"  # a copy of the whole home: the same session
    shutil.rmtree(cs.home, ignore_errors=True)
    shutil.copytree(base_home, cs.home)
    chat = cs.chat("base")
    log, client = chat.log, chat.client
    out: dict[str, tuple[int, float]] = {}
    # the slot as after the conversation's last turn (not measured)
    warm = ChatRequest(0, tuple(request_messages(log.baseline, log.records)), log.baseline.tools)
    client.chat_with_retry(warm, drop, extra={"max_tokens": 1})
    transcript = "\n".join(
        f"{m.TAG}: {getattr(m, 'content', '') or ''}"
        for m in request_messages(log.baseline, log.records)[1:]
    )
    # boxmaker: /compact, then the next message
    started = time.perf_counter()
    done = run_compaction(log, chat.compactor, drop)
    took = time.perf_counter() - started
    if not isinstance(done, TurnDone):
        raise SystemExit(f"bench compaction: boxmaker's compaction failed: {done}")
    assert chat.compactor is not None
    prewarm = chat.compactor.prewarms[-1].timings
    out["boxmaker compaction"] = (done.usage.prompt_n + prewarm.prompt_n, took)
    out["  of which the summary"] = (done.usage.prompt_n, float("nan"))
    out["  of which the pre-warm"] = (prewarm.prompt_n, float("nan"))
    started = time.perf_counter()
    turn = chat.say(NEXT)
    took = time.perf_counter() - started
    assert isinstance(turn, TurnDone), turn
    out["boxmaker first turn"] = (turn.usage.prompt_n, took)
    log.close()
    # cold: the conversation as a new prompt, then a new conversation from the summary
    cold = ChatRequest(
        0,
        (SystemMessage(SUMMARISER), UserMessage(f"{transcript}\n\n{INSTRUCTION}")),
        CORE_SCHEMAS,
        thinking=False,
    )
    started = time.perf_counter()
    budget = {"max_tokens": min(chat.compactor.config.summary_tokens, client.config.max_tokens)}
    got = client.chat_with_retry(cold, drop, extra=budget)
    took = time.perf_counter() - started
    out["cold compaction"] = (got.timings.prompt_n, took)
    system = f"{assemble_baseline(SYSTEM_MD, cs.home, ()).system}\n\n{got.content or ''}"
    first = ChatRequest(0, (SystemMessage(system), UserMessage(NEXT)), CORE_SCHEMAS, thinking=False)
    started = time.perf_counter()
    got = client.chat_with_retry(first, drop)
    took = time.perf_counter() - started
    out["cold first turn"] = (got.timings.prompt_n, took)
    return out


def soak(turns: int) -> None:
    with CompactStack() as cs:
        chat = cs.chat("soak")
        full, switches = 0, []
        started = time.perf_counter()
        for i in range(turns):
            out = chat.say(owner_text(i))
            full += isinstance(out, WireError) and out.code == ErrorCode.SESSION_FULL
            switches += [e.elapsed_ms for e in chat.events if isinstance(e, CompactedEvent)]
        took = time.perf_counter() - started
        chat.log.close()
        path = cs.home / "sessions" / "soak"
        chain = epoch_files.check_chain("soak", path)
        losses = sum(isinstance(r, CacheLoss) for e in chain for r in e.checked.records)
        finding = verify_session(cs.home, "soak")
    print(f"compaction soak: {turns} owner turns on one {CTX:,}-token slot in {took:.0f} s")
    print(f"  session_full: {full}, CacheLoss records: {losses}, verifies: {finding.ok}")
    ms = ", ".join(str(x) for x in switches)
    print(f"  epochs: {len(chain)}; each switch (summary, files, pre-warm), ms: {ms}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compaction")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--soak", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    if args.soak:
        soak(args.soak)
        return
    with CompactStack(compact={"keep_turns": 1, "min_cut": 0.0}) as cs:
        size = build(cs)
        runs = [one_run(cs, cs.home, r) for r in range(args.runs)]
    print(
        f"compaction (SmolLM2-135M, -t 1, one slot of {CTX:,} tokens, --cache-ram 0): a "
        f"conversation of {size:,} tokens, medians of {args.runs} runs"
    )
    print(f"  {'':24} {'prompt tokens read':>18} {'wall ms':>9}")
    med: dict[str, tuple[float, float]] = {}
    for key in runs[0]:
        n = statistics.median(r[key][0] for r in runs)
        ms = statistics.median(r[key][1] for r in runs) * 1000
        med[key] = (n, ms)
        shown = "" if ms != ms else f"{ms:,.0f}"  # nan: not timed apart
        print(f"  {key:24} {n:>18,.0f} {shown:>9}")
    for what in ("compaction", "first turn"):
        b, c = med[f"boxmaker {what}"], med[f"cold {what}"]
        print(
            f"  {what}: cold / boxmaker = {c[0] / max(b[0], 1):.1f}x the tokens read, "
            f"{c[1] / max(b[1], 1e-9):.2f}x the time"
        )
    both = {
        way: [sum(med[f"{way} {w}"][i] for w in ("compaction", "first turn")) for i in (0, 1)]
        for way in ("boxmaker", "cold")
    }
    (bn, bt), (cn, ct) = both["boxmaker"], both["cold"]
    print(
        f"  both together: cold / boxmaker = {cn / max(bn, 1):.1f}x the tokens read, "
        f"{ct / max(bt, 1e-9):.2f}x the time"
    )
    print(
        "  (boxmaker's compaction includes the switch and the pre-warm of the new prefix; every "
        "request generates up to the same max_tokens)"
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
