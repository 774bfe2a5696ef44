"""Every free slot holds the baseline before loopd serves (issue 40 item 3).

A new session takes the least-used slot, and its first request starts with the baseline (the
system prompt, the owner's core memory, the core tools): on a slot that holds nothing, or the
self-test's prompt, the server reads all of it, about 1,150 tokens on the tool profile (two
minutes on two busy cores). So at start, after the self-test and before the socket is bound,
each slot no session holds reads the baseline once with a one-word user turn and one generated
token; the first request of a new session then shares the cache up to its own user turn and reads
its own tokens only (llama-server's prefix cache). With slot saves on, one slot reads it and the
others get a copy of that slot (a save and restores: a file read, not a prompt read).

Slots that hold a session's cache (a loopd restart beside a running server) are left alone: the
resume of that session reuses it. A failure is one warning line: loopd serves as it did without.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from boxmaker.loopd.config import Config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.types import ChatRequest
from boxmaker.loopd.tools.port import baseline_tools
from boxmaker.proto import SystemMessage, UserMessage
from boxmaker.session.baseline import assemble_baseline
from boxmaker.session.errors import BaselineError

Say = Callable[[str], None]
Copy = Callable[[int, int], str | None]  # (from, to): None when done, else why not
PLACEHOLDER = "hello"  # the user turn the slot reads after the baseline; any short text will do


def _ignore(_event: object) -> None:
    pass


def prewarm(
    config: Config, client: Client, slots: list[int], copy: Copy | None, say: Say, warn: Say
) -> None:
    """Reads the baseline into `slots` (the first reads it, the others are copied from it when
    `copy` is given). One line when done, or one warning; never raises for the server's sake."""
    if not slots:
        return
    try:
        baseline = assemble_baseline(
            config.baseline.system, config.paths.home, baseline_tools(config.tools)
        )
    except BaselineError as exc:
        warn(f"prewarm: no baseline ({exc}); the first request of each slot reads it cold")
        return
    messages = (SystemMessage(baseline.system), UserMessage(PLACEHOLDER))
    started = time.monotonic()
    read: list[int] = []
    copied: list[int] = []
    tokens = 0
    for slot in slots:
        if read and copy is not None and (why := copy(read[0], slot)) is None:
            copied.append(slot)
            continue
        if read and copy is not None:
            warn(f"prewarm: slot {slot} could not be copied from slot {read[0]} ({why}); read")
        req = ChatRequest(slot, messages, baseline.tools, thinking=False)
        try:
            done = client.chat(req, _ignore, extra={"max_tokens": 1})
        except InferError as exc:
            warn(f"prewarm: slot {slot} did not read the baseline ({exc.describe()}); its first "
                 "request reads it cold")  # fmt: skip
            continue
        tokens = done.timings.cache_n + done.timings.prompt_n
        read.append(slot)
    if read or copied:
        how = f"; copied to {', '.join(map(str, copied))}" if copied else ""
        say(f"prewarm: the baseline ({tokens} tokens) read on slot(s) "
            f"{', '.join(map(str, read))}{how} in {time.monotonic() - started:.1f} s")  # fmt: skip
