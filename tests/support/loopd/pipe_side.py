"""One worker's side of loopd's slot gate over real pipes: a PipeGate writing to one pipe, the
main process's GateServer reading it and answering over a second, each end read by its own
thread, as loopd's main process and a worker do."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.workers.gate import GateServer, PipeGate, SlotCache
from boxmaker.loopd.workers.pipes import FrameWriter, read_frames


class PipeSide:
    """`pipe_gate` (the worker's) and `server` (the main process's, on `gate`, with the cache
    keeper, the session and the warning line GateServer takes); `with` closes both pipes."""

    def __init__(
        self,
        gate: SlotGate,
        cache: SlotCache | None = None,
        session: Callable[[], str | None] = lambda: None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        up_r, up_w = os.pipe()  # worker -> main
        down_r, down_w = os.pipe()  # main -> worker
        self.up = FrameWriter(up_w)
        self.down = FrameWriter(down_w)
        self.pipe_gate = PipeGate(self.up.send)
        if warn is None:
            self.server = GateServer(gate, self.down.send, cache, session)
        else:
            self.server = GateServer(gate, self.down.send, cache, session, warn)
        self.fds = [up_r, down_r]
        self.threads = [
            threading.Thread(target=self._main_reads, args=(up_r,), daemon=True),
            threading.Thread(target=self._worker_reads, args=(down_r,), daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _main_reads(self, fd: int) -> None:
        read_frames(fd, self.server.handle)
        self.server.close()

    def _worker_reads(self, fd: int) -> None:
        read_frames(fd, self.pipe_gate.deliver)
        self.pipe_gate.parent_gone()

    def __enter__(self) -> PipeSide:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.up.close()
        self.down.close()
        for t in self.threads:
            t.join(5.0)
        for fd in self.fds:
            os.close(fd)
