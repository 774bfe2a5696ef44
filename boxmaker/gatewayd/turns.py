"""One turn over loop.sock for gatewayd, blocking (the shell runs it in a thread).

The shared channel client (boxmaker/_client/channel.py) with `client_ref="mm:<post id>"`: a
repeated delivery is answered from the session's log (M4 section 6). `session_busy` (the first
delivery of this post still runs, after a gatewayd restart) is waited out and sent again, within
a bound: then loopd answers from the log. What the owner sees is the outcome: the answer (the
parts' texts and turn_done's content; never reasoning), or the error, and the approvals the turn
met (each one post).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from boxmaker._client.channel import ChatError, ChatSession
from boxmaker.gatewayd import crashpoint
from boxmaker.proto import (
    AnswerPartEvent,
    ApprovalNeededEvent,
    ChannelBody,
    ErrorCode,
    TurnDone,
    WireError,
)
from boxmaker.proto.frame import Frame

T = TypeVar("T")

BUSY_RETRY_S = 1.0
BUSY_WAIT_S = 900.0  # loopd's own longest silent waits (the channel client's silence bound)


@dataclass
class Outcome:
    answer: str | None = None  # the whole answer, when the turn finished
    error: WireError | None = None
    down: str | None = None  # loopd could not be reached or broke off: why
    approvals: list[ApprovalNeededEvent] = field(default_factory=list)


def run_turn(
    socket: Path,
    session: str,
    content: str,
    client_ref: str,
    on_approval: Callable[[ApprovalNeededEvent], None],
    now: Callable[[], float] = time.monotonic,
) -> Outcome:
    parts: list[str] = []
    first = [True]

    def show(_frame: Frame, body: ChannelBody) -> None:
        if first[0]:
            first[0] = False
            crashpoint.reached("during_turn")
        if isinstance(body, AnswerPartEvent):
            parts.append(body.text)
        elif isinstance(body, ApprovalNeededEvent):
            on_approval(body)

    chat = ChatSession(socket, session, resume=True, hint="is loopd running?")
    deadline = now() + BUSY_WAIT_S
    while True:
        parts.clear()
        try:
            final = chat.turn(content, show, client_ref=client_ref)
        except ChatError as e:
            return Outcome(down=str(e))
        if isinstance(final, TurnDone):
            text = "".join(parts) + (final.content or "")
            return Outcome(answer=text if final.content is not None or parts else None)
        if final.code is ErrorCode.SESSION_BUSY and now() < deadline:
            time.sleep(BUSY_RETRY_S)  # the same post's first delivery may still run
            continue
        return Outcome(error=final)


async def in_thread(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` on a daemon thread of its own. Not asyncio.to_thread: its executor's threads
    are joined at exit, so a SIGTERM during a turn would wait for the turn (up to the channel
    client's silence bound); the turn goes on in loopd, and a restart answers it from the log."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (fn(*args), None)
        except BaseException as e:  # handed to the awaiting task
            outcome = (None, e)
        with contextlib.suppress(RuntimeError):  # the loop is closed: gatewayd is stopping
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name="turn", daemon=True).start()
    return await done
