"""A worker that breaks the pipe protocol on purpose, for the pool's relay thread to survive:

    python -m tests.support.loopd.hostile_worker [--session <id>]

It reads its config frame and its turn, answers with one content event, then a `gate_ask`
whose `ask` is negative (a frame well formed but one the gate cannot act on), and then waits
for EOF on stdin.
"""

import os
import sys

from boxmaker.loopd.workers.pipes import FrameReader
from boxmaker.loopd.workers.wire import PIPE_KINDS
from boxmaker.proto import ContentEvent, channel_frame
from boxmaker.proto.frame import encode_frame


def main() -> int:
    stdin = FrameReader(0)
    stdin.next()  # config
    stdin.next()  # turn
    bad = encode_frame("gate_ask", {"ask": -1, "slot": 0}, False, PIPE_KINDS)
    os.write(1, channel_frame(ContentEvent("hello")) + bad)
    while stdin.next() is not None:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
