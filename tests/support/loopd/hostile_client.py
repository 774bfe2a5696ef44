"""The llama client in a child process, one forked child per chat, for the hostile tests.

    python -m tests.support.loopd.hostile_client CONFIG

Reads one line per chat on stdin, and for each forks a child that makes one `Client.chat`
attempt with the [inference] section of CONFIG and writes one JSON line on stdout:

    {"outcome": "completion" | "error" | "crash", "tag": ..., "message": ..., "elapsed_s": ...,
     "events": ..., "rss_start_kb": ..., "rss_peak_kb": ..., "rss_wait4_kb": ...}

A fork per chat measures each chat alone: a child's peak RSS (`resource.getrusage`) starts at what
it shares with this small parent at the fork, so `rss_peak_kb - rss_start_kb` is what the chat
itself took, and `os.wait4` reports the same peak from outside. Events are counted, not kept, so
the figure is the client's own. "crash" is anything that is not a Completion or an InferError
(with its traceback), or a child that died.
"""

from __future__ import annotations

import os
import resource
import sys
import time
import traceback
from typing import Any

import orjson

from boxmaker.loopd.config import InferenceConfig, load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.types import ChatEvent, ChatRequest
from boxmaker.proto import UserMessage

REQ = ChatRequest(0, (UserMessage("hi"),))


def _peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def chat_once(config: InferenceConfig) -> dict[str, Any]:
    events = 0

    def count(_: ChatEvent) -> None:
        nonlocal events
        events += 1

    out: dict[str, Any] = {"rss_start_kb": _peak_kb()}
    start = time.monotonic()
    try:
        completion = Client(config).chat(REQ, count)
        content = completion.content or ""
        out |= {"outcome": "completion", "tag": None, "message": f"{len(content)} chars"}
    except InferError as err:
        out |= {"outcome": "error", "tag": err.TAG, "message": str(err)[:2000]}
    except BaseException:
        out |= {"outcome": "crash", "tag": None, "message": traceback.format_exc()[-4000:]}
    out |= {"elapsed_s": time.monotonic() - start, "events": events, "rss_peak_kb": _peak_kb()}
    return out


def run_forked(config: InferenceConfig) -> dict[str, Any]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one chat, its result through the pipe, then out at once
        os.close(read_end)
        code = 0
        try:
            data = orjson.dumps(chat_once(config))
            while data:
                data = data[os.write(write_end, data) :]
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_end)
    parts = []
    while chunk := os.read(read_end, 65536):
        parts.append(chunk)
    os.close(read_end)
    _, status, usage = os.wait4(pid, 0)
    if not parts or status != 0:
        result: dict[str, Any] = {"outcome": "crash", "tag": None, "events": 0}
        result["message"] = f"the chat child died (wait status {status})"
    else:
        result = orjson.loads(b"".join(parts))
    result["rss_wait4_kb"] = usage.ru_maxrss
    return result


def main(argv: list[str]) -> int:
    config = load_config(argv[0], env={}).inference
    print(orjson.dumps({"ready": True}).decode(), flush=True)
    for _ in sys.stdin:
        print(orjson.dumps(run_forked(config)).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
