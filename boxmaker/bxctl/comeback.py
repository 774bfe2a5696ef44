"""`bxctl chat`'s wait for a loopd that restarts (issue 39 item 5).

The first message after `make ctl CMD='restart loopd'` ended the chat (the restart takes 11-22
s and said nothing): the owner had to start the chat again and retype. Now a message sent while
the loopd that answered before is not running waits for loop.sock, saying so every WAIT_SAY_S,
up to `--wait-loopd-ms` ($BOXMAKER_CHAT_WAIT_LOOPD_MS), and is sent when it is back. Only a
connection nobody took (NotRunning) is tried again: the turn was never sent, so none runs twice.
"""

from __future__ import annotations

import time
from typing import TextIO

from boxmaker._client.channel import ChatError, ChatSession, NotRunning, Show

WAIT_ENV = "BOXMAKER_CHAT_WAIT_LOOPD_MS"
WAIT_MS = 60_000  # a loopd restart took 11-22 s in the trial (issue 39 item 5)
WAIT_SAY_S = 5.0  # how often the wait says it still waits
WAIT_POLL_S = 0.2  # how often it tries loop.sock: a connect attempt is cheap


def turn_when_up(
    chat: ChatSession, content: str, show: Show, err: TextIO, wait_ms: int, *, compact: bool
) -> None:
    """`chat.turn`, waiting up to `wait_ms` for a loopd that is not running when the message
    is sent (a restart: issue 39 item 5), saying so every WAIT_SAY_S, then sending it. Only a
    connection nobody took is tried again: the turn was never sent, so it cannot run twice."""
    until: float | None = None
    said = 0.0
    while True:
        try:
            chat.turn(content, show, compact=compact)
            if until is not None:
                err.write("[loopd is back: the message was sent]\n")
                err.flush()
            return
        except NotRunning as e:
            now = time.monotonic()
            if not wait_ms:
                raise
            if until is None:
                until, said = now + wait_ms / 1000, now
                err.write(
                    f"[{e}]\n[waiting up to {_s(wait_ms)} for loopd to come back, then the "
                    "message is sent; Ctrl-C quits]\n"
                )
                err.flush()
            elif now >= until:
                raise ChatError(
                    f"{e}; waited {_s(wait_ms)} for it (--wait-loopd-ms or ${WAIT_ENV} sets the "
                    "bound); the message was not sent"
                ) from None
            elif now - said >= WAIT_SAY_S:
                said = now
                err.write(f"[still waiting for loopd: {round(until - now)} s left]\n")
                err.flush()
            time.sleep(WAIT_POLL_S)


def _s(ms: int) -> str:
    return f"{ms / 1000:g} s"
