"""The test as loopd's main process for one real session worker: its pipes, the config frame,
and the gate frames answered (pick, ask, release), so a test can drive turns and see every frame
a worker sends. A worker that stalls past BOUND_S is killed, so a read never hangs the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from boxmaker.loopd.config import ConfigSource
from boxmaker.loopd.workers.pipes import FrameReader, FrameWriter
from boxmaker.loopd.workers.wire import (
    FINAL_KINDS,
    RELAYED_KINDS,
    config_frame,
    gate_fields,
    gate_frame,
)
from boxmaker.proto import ChannelBody, decode_body

BOUND_S = 30.0  # no correct turn here comes near it


class MainSide:
    """One worker process for `session`; `turn` runs one turn and returns its channel bodies."""

    def __init__(self, source: ConfigSource, session: str) -> None:
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "boxmaker.loopd.workers.worker", "--session", session],
            stdin=down_r,
            stdout=up_w,
            stderr=subprocess.PIPE,
        )
        os.close(down_r)
        os.close(up_w)
        self.down = FrameWriter(down_w)
        self.up = FrameReader(up_r)
        self.down.send(
            config_frame(source.text, source.source, str(source.base_dir), dict(source.env))
        )
        self.session = session
        self.asked_epochs: list[int | None] = []  # each gate_ask's epoch, in order

    def turn(self, turn: bytes, notes: list[dict[str, Any]] | None = None) -> list[ChannelBody]:
        """Sends one `turn` frame; every gate_grant carries `notes`. The channel bodies the
        worker sent, the final one last (none after EOF: the worker died first)."""
        self.down.send(turn)
        watchdog = threading.Timer(BOUND_S, self.proc.kill)
        watchdog.start()
        try:
            return self._frames(notes or [])
        finally:
            watchdog.cancel()

    def _frames(self, notes: list[dict[str, Any]]) -> list[ChannelBody]:
        out: list[ChannelBody] = []
        while (frame := self.up.next()) is not None:
            if frame.kind == "gate_pick":
                ask = gate_fields(frame)[0]
                self.down.send(gate_frame("gate_picked", ask, slot=frame.body["slots"][0]))
            elif frame.kind == "gate_ask":
                self.asked_epochs.append(frame.body.get("epoch"))
                grant = {"cache": notes} if notes else {}
                self.down.send(gate_frame("gate_grant", gate_fields(frame)[0], **grant))
            elif frame.kind == "gate_release":
                self.down.send(gate_frame("gate_left", gate_fields(frame)[0]))
            elif frame.kind in RELAYED_KINDS:
                out.append(decode_body(frame))
                if frame.kind in FINAL_KINDS:
                    return out
        return out

    def close(self) -> tuple[int, str]:
        """Closes the worker's stdin and waits for it: its exit code and stderr."""
        self.down.close()
        try:
            _, err = self.proc.communicate(timeout=BOUND_S)
        finally:
            self.proc.kill()
        os.close(self.up.fd)
        return self.proc.returncode, err.decode()
