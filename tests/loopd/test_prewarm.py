"""The pre-warm's ways around a failure (loopd/prewarm.py; issue 40 item 3): a slot that cannot
be copied is read instead, a slot the server refuses is one warning and the others go on, and
no free slot means no request. The real server's side (each new session's first request reads
its own tokens only, on both slots) is tests/e2e/test_local_stack.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from boxmaker.loopd.config import Config, parse_config
from boxmaker.loopd.llama.errors import ConnectFailed
from boxmaker.loopd.llama.types import ChatRequest, Completion, FinishReason
from boxmaker.loopd.prewarm import prewarm
from boxmaker.proto import SystemMessage, Timings
from tests.support.config import fake_expect, fake_inference, loopd_toml


class Server:
    """What prewarm asks of the client: one chat per slot read; `down` slots refuse."""

    def __init__(self, down: frozenset[int] = frozenset()) -> None:
        self.down = down
        self.read: list[int] = []
        self.requests: list[ChatRequest] = []

    def chat(self, req: ChatRequest, _on_event: Any, *, extra: Any = None) -> Completion:
        assert extra == {"max_tokens": 1}
        self.requests.append(req)
        if req.slot in self.down:
            raise ConnectFailed("the server closed the connection")
        self.read.append(req.slot)
        return Completion("c", "", None, (), FinishReason.LENGTH, Timings(0, 300, 1), 0, False)


def config(tmp_path: Path, slots: list[int]) -> Config:
    system = tmp_path / "system.md"
    system.write_text("You are Boxmaker.\n")
    text = loopd_toml({
        "inference": fake_inference(tmp_path / "infer.sock", slots=slots),
        "expect": {**fake_expect(), "total_slots": 4},
        "paths": {"home": str(tmp_path / "home")},
        "baseline": {"system": str(system)},
    })  # fmt: skip
    return parse_config(text, str(tmp_path / "loopd.toml"), tmp_path)


def test_one_read_then_copies_and_a_failed_copy_is_read(tmp_path: Path) -> None:
    server, said, warned = Server(), list[str](), list[str]()
    copies: list[tuple[int, int]] = []

    def copy(source: int, dest: int) -> str | None:
        copies.append((source, dest))
        return "the save folder is full" if dest == 2 else None

    prewarm(config(tmp_path, [0, 1, 2]), server, [0, 1, 2], copy, said.append, warned.append)  # type: ignore[arg-type]
    assert server.read == [0, 2]
    assert copies == [(0, 1), (0, 2)]
    assert warned == [
        "prewarm: slot 2 could not be copied from slot 0 (the save folder is full); read"
    ]
    assert said[0].startswith(
        "prewarm: the baseline (300 tokens) read on slot(s) 0, 2; copied to 1 in "
    )
    first = server.requests[0]
    assert first.messages[0] == SystemMessage("You are Boxmaker.")  # the baseline's own text
    assert first.thinking is False


def test_a_slot_the_server_refuses_is_one_warning(tmp_path: Path) -> None:
    server, said, warned = Server(down=frozenset({0})), list[str](), list[str]()
    prewarm(config(tmp_path, [0, 1]), server, [0, 1], None, said.append, warned.append)  # type: ignore[arg-type]
    assert server.read == [1]
    assert warned == [
        "prewarm: slot 0 did not read the baseline (connect: the server closed the connection); "
        "its first request reads it cold"
    ]
    assert said[0].startswith("prewarm: the baseline (300 tokens) read on slot(s) 1 in ")


def test_no_free_slot_asks_nothing(tmp_path: Path) -> None:
    server = Server()
    prewarm(config(tmp_path, [0, 1]), server, [], None, print, print)  # type: ignore[arg-type]
    assert server.requests == []
