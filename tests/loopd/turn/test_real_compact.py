"""Compaction on the REAL llama-server, `--cache-ram 0`, one 2,048-token slot (issue 21).

One long chat, driven until it has crossed three epochs (bounded), never `session_full`; at every
switch that ran before a turn's message:
- the summary request read only its instruction: its `cache_n` (the `epoch_end`'s) is at least
  the previous completion's total less 64;
- the first completion of the turn after it read only that turn's message: its `prompt_n` is at
  most the message's own tokens (the server's tokenizer) plus 64 (the template's wrapping), since
  the pre-warm left the new epoch's prefix in the slot;
and, on the wire (a tee in front of inferproxy), the summary request is the previous request's
messages, the answer to it, then the instruction, with the same tools. At the end every epoch
verifies, with the links between them.
"""

from __future__ import annotations

import itertools

from boxmaker.loopd.turn.compact import INSTRUCTION
from boxmaker.proto import CompactedEvent, CompactingEvent, EpochEnd, TurnDone, Usage, User
from boxmaker.session import epoch_files
from boxmaker.session.verify import verify_session
from tests.support.loopd.real_compact import CompactStack, owner_text

SLACK = 64
MAX_TURNS = 90  # the bound: three epochs take about 40 turns of the tiny model


def test_a_long_chat_crosses_three_epochs_with_the_cache_hot() -> None:
    with CompactStack() as cs:
        chat = cs.chat("long")
        checked = 0
        for i in itertools.count():
            assert i < MAX_TURNS, f"only {chat.log.epoch} epochs after {MAX_TURNS} turns"
            epoch = chat.log.epoch
            text = owner_text(i)
            sent = len(cs.chat_bodies())
            out = chat.say(text)
            assert isinstance(out, TurnDone), (i, out)
            failed = [e.error for e in chat.events if isinstance(e, CompactedEvent) and e.error]
            assert not failed, failed
            if chat.log.epoch == epoch:
                continue
            compacting = next(e for e in chat.events if isinstance(e, CompactingEvent))
            done = next(e for e in chat.events if isinstance(e, CompactedEvent))
            assert done.after < done.before, done
            path = cs.home / "sessions" / "long"
            closed = epoch_files.check_chain("long", path)[epoch].checked.records
            end = closed[-1]
            assert isinstance(end, EpochEnd)
            last = [r for r in closed if isinstance(r, Usage)][-1]
            previous_total = last.cache_n + last.prompt_n + last.predicted_n
            assert end.cache_n >= previous_total - SLACK, (end, last)
            if compacting.reason == "threshold" and chat.events.index(compacting) == 0:
                before, summary = cs.chat_bodies()[sent - 1 : sent + 1]
                n = len(before["messages"])
                assert summary["messages"][:n] == before["messages"]
                assert summary["messages"][n]["role"] == "assistant"
                assert summary["messages"][n + 1 :] == [{"role": "user", "content": INSTRUCTION}]
                assert summary["tools"] == before["tools"]
                records = list(chat.log.records)
                user_at = max(n for n, r in enumerate(records) if isinstance(r, User))
                first = next(r for r in records[user_at:] if isinstance(r, Usage))
                own = len(chat.client.tokenize(text))
                assert first.prompt_n <= own + SLACK, (first, own)
                checked += 1
            if chat.log.epoch >= 3:
                break
        chat.log.close()
        assert checked >= 1
        finding = verify_session(cs.home, "long")
        assert finding.ok, finding.error
        assert finding.epochs == 4
        print(f"\n{i + 1} turns, {finding.epochs} epochs, {checked} switches checked")
