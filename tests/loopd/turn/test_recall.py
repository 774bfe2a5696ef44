"""`recall` in a compacted session (issue 21), through the turn loop against the scripted model
on the fake server: the model finds it with find_tool and calls it with call_tool for a folded
record, and gets that record's exact content; loopd answers it beside FakeTools (the port never
sees it), capped by the loop's cap like any result; what does not exist is an error that says
what does."""

from __future__ import annotations

from typing import Any

import orjson

from boxmaker.loopd.tools.registry import RECALL_SCHEMA
from boxmaker.loopd.turn.limits import TRUNCATED_MARK
from boxmaker.loopd.turn.runner import run_compaction
from boxmaker.proto import EpochEnd, ToolResult, TurnDone
from boxmaker.proto.log import decode_line
from boxmaker.session.store import SessionLog
from tests.support.loopd.compact import LONG, SUMMARY, Chat, chat
from tests.support.turn import Env, calls, chat_bodies, new_session, say

SECRET = "The code word is PERIWINKLE-42. " * 20  # 640 characters


def recall_call(epoch: int, seq: int, prefix: str = "r") -> Any:
    args = {"name": "recall", "arguments": {"epoch": epoch, "seq": seq}}
    return calls(("call_tool", args), prefix=prefix)


def epoch_0(env: Env) -> list[Any]:
    data = (env.home / "sessions" / "s1" / "0.jsonl").read_bytes()
    return [decode_line(line).record for line in data.splitlines(keepends=True)]


def results(log: SessionLog) -> list[ToolResult]:
    return [r for r in log.records if isinstance(r, ToolResult)]


def compacted_session(c: Chat) -> int:
    """Two turns (the first echoes SECRET through a tool), folded by /compact with keep_turns 1;
    returns the seq of the folded tool result in epoch 0."""
    echo = {"name": "echo", "arguments": {"text": SECRET}}
    assert isinstance(c.run("say it", calls(("call_tool", echo)), say(LONG + " one")), TurnDone)
    assert isinstance(c.run("two", say(LONG + " two")), TurnDone)
    seq = next(i for i, r in enumerate(c.log.records) if isinstance(r, ToolResult))
    c.env.model.load([say(SUMMARY), say("(pre-warm)")])
    assert isinstance(run_compaction(c.log, c.compactor), TurnDone)
    assert c.log.epoch == 1
    return seq


def test_the_model_finds_recall_and_gets_a_folded_record_exactly(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        seq = compacted_session(c)
        assert SECRET not in orjson.dumps([r.content for r in results(log)]).decode()
        out = c.run(
            "What was the code word?",
            calls(("find_tool", {"query": "folded"})),
            recall_call(0, seq),
            say("PERIWINKLE-42"),
        )
        assert isinstance(out, TurnDone), out
        found, recalled = results(log)[-2:]
        body, footer = found.content.rsplit("\n", 1)
        assert orjson.loads(body) == [RECALL_SCHEMA.to_json()]
        assert footer == "Call it with call_tool."
        head, content = recalled.content.split("\n", 1)
        assert content == SECRET  # the folded record's content, exactly
        assert head.startswith(f"[recalled: epoch 0, seq {seq}, tool_result of ")
        assert (recalled.untrusted, recalled.truncated) == (False, False)
        # the baseline told the model which records were folded
        system = chat_bodies(env.fake)[-1]["messages"][0]["content"]
        ended = next(r for r in reversed(epoch_0(env)) if isinstance(r, EpochEnd))
        folded = f"Epoch 0's records 1-{ended.keep_from - 1} were folded (recall, via find_tool"
        assert folded in system
        assert 0 < seq < ended.keep_from


def test_a_recalled_record_over_the_cap_is_cut_and_says_so(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        seq = compacted_session(c)
        out = c.run("again", recall_call(0, seq), say("ok"), tool_result_cap=200)
        assert isinstance(out, TurnDone), out
        cut = results(log)[-1]
        assert cut.truncated is True
        assert cut.content.endswith(TRUNCATED_MARK)
        assert len(cut.content.encode()) <= 200 + len(TRUNCATED_MARK)  # the cap, then the mark
        assert cut.content.split("\n", 1)[1].startswith("The code word is PERIWINKLE-42.")


def test_recall_of_what_is_not_folded_says_what_is(env: Env) -> None:
    with new_session(env.home) as log:
        c = chat(env, log)
        seq = compacted_session(c)
        script = [recall_call(1, 1, "a"), recall_call(0, 999, "b"), recall_call(3, 0, "c")]
        out = c.run("and these?", *script, say("ok"))
        assert isinstance(out, TurnDone), out
        current, missing, future = (r.content for r in results(log)[-3:])
        assert current == (
            "error: recall: epoch 1 is the current one: its records are already in the "
            "conversation above; the folded epochs are 0"
        )
        assert missing.startswith("error: recall: epoch 0 has records 0 to ")
        assert missing.endswith("; there is no seq 999")
        assert future == "error: recall: there is no epoch 3; the folded epochs are 0"
        assert seq > 0
