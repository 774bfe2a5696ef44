"""A brokerd tool list with entries loopd cannot take (issue 29.4): `call_tool`, `find_tool`, a
name twice. Each bad entry is refused with a warning on loopd's stderr and the turn goes on with
the rest, as every other malformed list degrades (before: every turn ended `internal`, "find_tool,
call_tool are loopd's own tools").

Real `loopd serve` and its worker on the fake llama-server; brokerd is played by a small Unix
socket server in this file that answers `list` with the list under test and `call` with a
result (what brokerd says is the variant here, not how it decides).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.proto import TurnDone
from boxmaker.proto.broker import BROKER_KINDS
from boxmaker.proto.frame import NEED_DATA, Frame, FrameDecoder, encode_frame
from tests.support.brokerd.rig import serve_loopd
from tests.support.procs import Daemon, wait_for
from tests.support.serve import BOUND_S, ServeEnv, serve_env, turn
from tests.support.turn import calls, say


def _schema(name: str, description: str = "a tool") -> dict[str, Any]:
    return {"name": name, "description": description, "parameters": {"type": "object"}}


class FakeBroker(threading.Thread):
    """Answers `list` with `tools`, and `call` with a result naming the tool."""

    def __init__(self, path: Path, tools: list[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.tools = tools
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        self.calls: list[dict[str, Any]] = []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(BOUND_S)
                frame = self._read(conn)
                if frame is None:
                    continue
                if frame.kind == "list":
                    conn.sendall(encode_frame("tools", {"tools": self.tools}, True, BROKER_KINDS))
                else:
                    self.calls.append(frame.body)
                    body = {"content": f"ran {frame.body['tool']}", "class": "public",
                            "untrusted": False, "truncated": False}  # fmt: skip
                    conn.sendall(encode_frame("result", body, True, BROKER_KINDS))

    def _read(self, conn: socket.socket) -> Frame | None:
        decoder = FrameDecoder(BROKER_KINDS)
        while True:
            got = decoder.next_frame()
            if isinstance(got, Frame):
                return got
            if got is not NEED_DATA:
                return None
            data = conn.recv(65536)
            if not data:
                return None
            decoder.receive_data(data)

    def stop(self) -> None:
        self.listener.close()


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        yield e


READ = _schema("read_file", "Reads a file.")
# Each list: what brokerd grants, and the tools find_tool must then offer.
LISTS = [
    ([_schema("call_tool"), READ], ["read_file"]),
    ([_schema("find_tool"), READ], ["read_file"]),
    ([READ, _schema("find_tool"), _schema("call_tool")], ["read_file"]),
    ([_schema("call_tool"), _schema("call_tool"), READ], ["read_file"]),
    ([READ, _schema("read_file", "a second one"), _schema("note")], ["read_file", "note"]),
    ([_schema("find_tool")], []),
]


@pytest.mark.parametrize(("granted", "offered"), LISTS)
def test_bad_entries_are_refused_and_the_turn_goes_on(
    env: ServeEnv, granted: list[dict[str, Any]], offered: list[str]
) -> None:
    broker = FakeBroker(env.folder / "broker.sock", granted)
    broker.start()
    try:
        daemon = serve_loopd(env, env.folder / "broker.sock")
        find = ("find_tool", {"query": ""})
        steps = [calls(find), say("found")]
        if offered:
            steps = [calls(find), calls(("call_tool", {"name": offered[0], "arguments": {}})),
                     say("done")]  # fmt: skip
        env.model.load(steps)
        frames = turn(env.socket, "s1", "what tools are there?", resume=False)
        assert isinstance(frames[-1], TurnDone), frames[-1]
        results = [r for r in env.log_lines("s1") if r["type"] == "tool_result"]
        found = results[0]["content"]
        names = [] if found == "No tool matches." else orjson.loads(found.rsplit("\n", 1)[0])
        assert [t["name"] for t in names] == [*offered, "recall"] or (
            not offered and [t["name"] for t in names] == ["recall"]
        )
        if offered:
            assert results[1]["content"] == f"ran {offered[0]}"
        wait_for(lambda: _err(daemon), "the warning on loopd's stderr", BOUND_S)
    finally:
        broker.stop()


def _err(daemon: Daemon) -> bool:
    return any("the tool list:" in line and "refused" in line for line in daemon.err_lines)
