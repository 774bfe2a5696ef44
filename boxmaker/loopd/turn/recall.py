"""`recall` beside the port: loopd answers it itself, whatever the port (issue 21).

`recall` is found through `find_tool` and called through `call_tool` like any registry tool, but
it reads only the session's own log (`session.recall`), which loopd already holds and brokerd has
no access to: there is no authority to ask for, so it is answered here, in the call's thread, and
every other call goes to the port (FakeTools or BrokerPort) as before. Its result is capped by the
loop like any tool's, and a recalled untrusted tool result stays untrusted.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from boxmaker.loopd.tools.port import ToolPort
from boxmaker.loopd.tools.registry import RECALL
from boxmaker.proto import ResultClass, ToolRequest, ToolResponse
from boxmaker.session.recall import recall


class WithRecall:
    """`port`, with `recall` answered from `log`'s files (`store.SessionLog`: its `path` and
    current `epoch`, read at each call, since a compaction moves it mid-turn)."""

    def __init__(self, port: ToolPort, log: object) -> None:
        self._port = port
        self._log = log

    def call(self, request: ToolRequest) -> ToolResponse:
        if request.tool != RECALL:
            return self._port.call(request)
        path, current = getattr(self._log, "path", None), getattr(self._log, "epoch", None)
        if not isinstance(path, Path) or not isinstance(current, int):
            return _text("error: recall: this session keeps no log files to recall from")
        args = orjson.loads(request.arguments)  # checked against RECALL_SCHEMA by the loop
        got = recall(path, current, int(args["epoch"]), int(args["seq"]))
        return ToolResponse(got.content, got.class_, untrusted=got.untrusted, truncated=False)


def _text(content: str) -> ToolResponse:
    return ToolResponse(content, ResultClass.PUBLIC, untrusted=False, truncated=False)
