"""An answer larger than one frame (issue 24.4): turn_done must fit MAX_FRAME_BYTES while
[inference] max_content_bytes allows 4 MiB. The answer reaches the client whole, split into
`answer_part` events and a turn_done (docs/protocol.md), and `bxctl chat --say` prints it all."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from boxmaker.loopd.llama.request import CHAT_PATH
from boxmaker.proto import AnswerPartEvent, ContentEvent, TurnDone
from boxmaker.proto.frame import MAX_FRAME_BYTES
from tests.support.recorded import Recorded
from tests.support.replies import Reply, sse_reply
from tests.support.serve import BOUND_S, ServeEnv, turn
from tests.support.turn import completion_events, say

# Quotes, newlines and a control character grow in JSON: the frame is well over the limit.
ANSWER = ('say "this" \\ twice\n\x01 é ' * 60_000)[:1_500_000]
BXCTL_CHAT = (sys.executable, "-m", "boxmaker.bxctl", "chat")
PIECE = 65_536  # the fake streams the answer in pieces, as llama-server does (many small ones)


def big_answer(_request: Recorded) -> Reply:
    events: list[Any] = []
    for event in completion_events(say(ANSWER), 0, 100, len(ANSWER)):
        delta = event["choices"][0]["delta"]
        if not delta.get("content"):
            events.append(event)
            continue
        for i in range(0, len(ANSWER), PIECE):
            piece = {**event["choices"][0], "delta": {"content": ANSWER[i : i + PIECE]}}
            events.append({**event, "choices": [piece]})
    return sse_reply(events)


def test_an_answer_over_one_frame_reaches_the_client_whole(env: ServeEnv) -> None:
    env.start(spare_worker=False)
    env.fake.on("POST", CHAT_PATH, big_answer)  # after the self-test, which needs the model
    frames = turn(env.socket, "big", resume=False)
    done = frames[-1]
    assert isinstance(done, TurnDone), frames[-1]
    assert len(ANSWER.encode()) > MAX_FRAME_BYTES
    parts = [f.text for f in frames if isinstance(f, AnswerPartEvent)]
    assert parts, "the answer was not split"
    assert "".join(parts) + (done.content or "") == ANSWER
    streamed = "".join(f.text for f in frames if isinstance(f, ContentEvent))
    assert streamed == ANSWER
    assert env.log_lines("big")[-2]["content"] == ANSWER  # the assistant record, then usage
    # bxctl chat --say prints the whole answer (a newline added where it had none), its control
    # characters escaped visibly as everything the model wrote is (issue 37 item 5).
    said = subprocess.run(
        [*BXCTL_CHAT, "--socket", str(env.socket), "--session", "big", "--say", "again"],
        capture_output=True,
        timeout=BOUND_S,
        check=False,
    )
    assert said.returncode == 0, said.stderr
    assert said.stdout.decode() == ANSWER.rstrip("\n").replace("\x01", "\\x01") + "\n"
