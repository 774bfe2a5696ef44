"""`run_selftest`: the self-test's one entry point, for `loopd serve` and `loopd selftest`.

The checks run on the slot least likely to hold a live session's cache (the gate's order). With
`[cache] slot_save`, `open_keeper` first asks whether the server saves slots (`probe`: a save of
an empty slot when there is one; one `ok` or `off` line, never a failure: without it loopd runs
as with slot_save off). When serving, the keeper then frees the checks' slot (`around_selftest`:
one no session holds, else its holder saved first), and the prompt rate is timed there (the
checks replace that slot's cache anyway) for the keeper's after-turn save rule. `loopd selftest`
only probes and runs the checks on the first configured slot: the keeper's state belongs to the
`loopd serve` that may be running.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from boxmaker.loopd.cache.keeper import CacheKeeper, server_identity
from boxmaker.loopd.cache.policy import PROBE_NAME, SAVE_PREFIX, Mark, marks_of
from boxmaker.loopd.config import Config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import HttpStatus, InferError
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.llama.info import Props
from boxmaker.loopd.llama.slots import NOT_SUPPORTED

from .checks import iter_selftest

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Outcome:
    failed: tuple[str, ...]  # the checks that failed (none: loopd may start)
    keeper: CacheKeeper | None  # when serving with slot save on: the keeper, not yet started
    slot: int  # the slot the checks ran on (its cache is theirs now)


def run_selftest(config: Config, gate: SlotGate, say: Say, warn: Say, *, serving: bool) -> Outcome:
    """Runs the self-test; each line (`selftest ok ...`, `selftest FAILED ...`) goes to `say`."""
    client = Client(config.inference)
    keeper = None
    if config.cache.slot_save:
        keeper = open_keeper(config, gate, client.props, say, warn)
    slots = config.inference.slots
    # The slot least likely to hold a live session's cache; `loopd selftest` keeps the first.
    order = gate.order(slots) if serving else list(slots)
    around: AbstractContextManager[int] = contextlib.nullcontext(order[0])
    if serving and keeper is not None:
        around = keeper.around_selftest(order)
    failed: list[str] = []
    with around as slot:  # with slot_save: a slot no session holds, or its holder saved first
        if serving and keeper is not None:
            measure_prompt_rate(keeper, slot, warn)
        inference = dataclasses.replace(
            config.inference, slots=(slot, *(s for s in slots if s != slot))
        )
        tested = dataclasses.replace(config, inference=inference)
        for result in iter_selftest(tested, Client(inference)):
            say(f"selftest {result.line()}")
            if not result.ok:
                failed.append(result.check)
    return Outcome(tuple(failed), keeper if serving else None, slot)


def open_keeper(
    config: Config,
    gate: SlotGate,
    props: Callable[[], Props],
    say: Say,
    warn: Say,
) -> CacheKeeper | None:
    """The cache keeper, when the server saves slots; one self-test line either way (`ok` or
    `off`, never a failure: without it loopd runs as it would with slot_save off)."""
    try:
        found = props()
    except InferError as exc:
        say(f"selftest off     slot_save: no answer from /props ({exc.describe()})")
        return None
    keeper = CacheKeeper(config, gate, server_identity(config.inference.model, found), warn, props)
    on, line = probe(keeper)
    say(f"selftest {'ok      ' if on else 'off     '}slot_save: {line}")
    return keeper if on else None


def probe(keeper: CacheKeeper) -> tuple[bool, str]:
    """Whether the server saves slots: a save of a slot (an empty one if there is one).

    Returns (on, the self-test's line). The /slots read is kept for `around_selftest` (one call
    fewer through inferproxy's accept bucket).
    """
    try:
        marks = keeper.probe_marks = marks_of(keeper.files.slots())
        slot = next(
            (s for s in keeper.slots if marks.get(s, Mark(None, 1)).tokens == 0), keeper.slots[0]
        )
        io = keeper.files.save(slot, keeper.policy.name(PROBE_NAME, 0))
    except HttpStatus as exc:
        if exc.status == NOT_SUPPORTED:
            return False, "the server was not started with --slot-save-path; the feature is off"
        return False, f"the server refused a slot save ({exc}); the feature is off"
    except InferError as exc:
        return False, f"no answer to a slot save ({exc.describe()}); the feature is off"
    return True, (
        f"a save of slot {slot} ({io.tokens} tokens) took {io.elapsed_us} us; files "
        f"{SAVE_PREFIX}{keeper.policy.ident}-<hash of the session id>-e<epoch>.bin"
    )


def measure_prompt_rate(keeper: CacheKeeper, slot: int, warn: Say) -> None:
    """The prompt rate, timed on the self-test's slot (whose cache the checks replace anyway),
    for the keeper's after-turn rule; a failure leaves that rule off (one warning)."""
    try:
        rate = keeper.files.prompt_rate(slot)
    except InferError as exc:
        warn(f"cache: the prompt rate could not be measured ({exc.describe()}); "
             "no saves right after a turn")  # fmt: skip
        return
    keeper.set_prompt_rate(rate)
    if rate is not None:
        k = keeper.cache.save_factor
        warn(f"cache: a prompt token read in {rate:.0f} us on slot {slot}; a slot is saved "
             f"after a turn when a re-read costs over {k} saves")  # fmt: skip
