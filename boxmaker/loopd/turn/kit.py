"""One session's turn kit: what every turn of it runs with, assembled from the config in one place.

    kit = TurnKit.from_config(config, client)
    outcome = kit.turn(log, "What time is it?", tools=kit.tools(log, session, on_approval),
                       thinking=None, on_event=print)

A session worker (workers/worker.py) and `loopd turn` (turn/command.py) both build their turns
here (issue 35.3: they had drifted apart; `loopd turn` measured no message, gave brokerd no epoch
and no tool timeout). The kit holds the client, the `[loop]` config, the room a turn may fill
(`compact.Room`, from `[expect] n_ctx` and `[compact] at`), the compactor (None with compaction
off) and the message fit; both carry the same Room. What differs from turn to turn is passed in:
the message, the thinking switch, where events go, the tools' approval callback and `stop`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from boxmaker.loopd.config import Config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.tools.port import OnApproval, tool_port
from boxmaker.loopd.turn.compact import Room
from boxmaker.loopd.turn.compactor import Compactor
from boxmaker.loopd.turn.runner import (
    MessageFit,
    OnEvent,
    SessionLogLike,
    run_compaction,
    run_turn,
)
from boxmaker.proto import TurnDone, WireError
from boxmaker.session import epoch_files


def _never() -> bool:
    return False


@dataclass(frozen=True)
class TurnKit:
    config: Config
    client: Client
    room: Room
    compactor: Compactor | None
    fit: MessageFit

    @classmethod
    def from_config(cls, config: Config, client: Client) -> TurnKit:
        room = Room(config.expect.n_ctx, config.compact.at)
        # A large message is measured by the server's tokenizer before it is appended (29.3).
        count = lambda text: len(client.tokenize(text))  # noqa: E731
        compactor = Compactor.from_config(config, client)
        return cls(config, client, room, compactor, MessageFit(room, count))

    def tools(
        self, log: epoch_files.SessionLog, session: str, on_approval: OnApproval
    ) -> dict[str, Any]:
        """run_turn's `port` and `registry` for one turn (`tools.port.tool_port`): brokerd is
        given the session, its epoch at each call, and `[loop] tool_timeout_ms` (it cancels a
        call at it)."""
        epoch = lambda: log.epoch  # noqa: E731  read at each call: a compaction moves it
        timeout_ms = self.config.loop.tool_timeout_ms
        return tool_port(self.config.tools, on_approval, session, epoch, timeout_ms)

    def turn(
        self,
        log: SessionLogLike,
        content: str,
        *,
        tools: dict[str, Any],
        thinking: bool | None,
        on_event: OnEvent,
        stop: Callable[[], bool] = _never,
        client_ref: str | None = None,
    ) -> TurnDone | WireError:
        """One turn (`runner.run_turn`); `thinking` None is `[loop] thinking`; `client_ref` the
        turn frame's, written into the User record (M4 section 6)."""
        loop = self.config.loop
        return run_turn(
            log,
            content,
            client=self.client,
            **tools,
            config=loop,
            thinking=loop.thinking if thinking is None else thinking,
            on_event=on_event,
            compactor=self.compactor,
            fit=self.fit,
            stop=stop,
            client_ref=client_ref,
        )

    def compaction(self, log: SessionLogLike, on_event: OnEvent) -> TurnDone | WireError:
        """`/compact`: the fold alone (`runner.run_compaction`)."""
        return run_compaction(log, self.compactor, on_event)
