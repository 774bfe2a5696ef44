"""Pre-warm then save (issue 21 items 4 and 6) on the REAL llama-server, `--cache-ram 0`.

After `/compact`, the pre-warm's release (the first of epoch 1) is saved under epoch 1's name,
and epoch 0's file is removed; llama-server is then SIGKILLed and started again, and the first
turn of epoch 1 restores that file and reads only its own message. `save_factor` is at its top
so the cost rule saves nothing after its first save: only the new-epoch rule can save the
pre-warm (and the idle save waits ten minutes).
"""

from __future__ import annotations

from boxmaker.proto import CacheRestored, TurnDone, Usage, sha256_hex
from tests.support.loopd.cache import CacheStack, turns
from tests.support.procs import wait_for

SLACK = 64  # the template's wrapping of the message, as in test_real_compact
OWN = 16  # "Thanks." is fewer tokens than this
SAVE_BOUND_S = 60.0  # a save of ~600 tokens takes milliseconds; the bound is for a busy machine


def test_the_prewarm_is_saved_and_restored_after_a_server_restart() -> None:
    compact = {"keep_turns": 1, "min_cut": 0.0, "at": 0.99}
    cache = {"idle_save_ms": 600_000, "save_factor": 1_000_000}
    with CacheStack(slots=1, cache=cache, tables={"compact": compact}) as cs:
        cs.cache["folder"] = str(cs.saves)
        cs.start_loopd()
        cs.turn("ep", "Tell me a story about a fox.", resume=False)
        for text in ("Tell me about a river.", "Describe a mountain.", "Now name a colour."):
            cs.turn("ep", text)  # three turns to fold: their answers outweigh the summary
        head = f"bx-*-{sha256_hex(b'ep')[:32]}"
        done = cs.turn("ep", "/compact", compact=True)[-1]
        assert isinstance(done, TurnDone), done
        assert done.content == "compacted into epoch 1"

        def epoch1_saved() -> bool:  # the file, then the state that names it
            return bool(cs.state().get("saves", {}).get("ep", {}).get("epoch") == 1)

        wait_for(epoch1_saved, "the pre-warm's save of epoch 1", SAVE_BOUND_S)
        assert len(list(cs.saves.glob(f"{head}-e1.bin"))) == 1
        assert list(cs.saves.glob(f"{head}-e0.bin")) == []  # dead once epoch 1 asked
        cs.restart_server()
        cs.turn("ep", "Thanks.")
        last = turns(cs.records("ep", 1))[-1]
        assert any(isinstance(r, CacheRestored) for r in last), last
        first = next(r for r in last if isinstance(r, Usage))
        assert first.prompt_n <= OWN + SLACK, first  # "Thanks." alone: the prefix came back
        assert first.cache_n > first.prompt_n, first
        print(f"\nfirst turn of epoch 1 after a server restart: {first}")
