"""A scripted llama-server's slots: /slots, /props and the save/restore actions (issue 14).

`FakeSlots` plays them as llama-server does (measured on the real one: id_task moves with
completions only; a missing file answers 400; no --slot-save-path answers 501; a file name over
255 characters answers 400 "Invalid filename"), and writes each save file into a folder, so the
keeper's bound on the folder can be seen at work. `odd` lets a test make the answers odd.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from boxmaker._toml import toml_dumps
from boxmaker.loopd.cache.keeper import CacheKeeper
from boxmaker.loopd.config import Config, parse_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.selftest.run import open_keeper
from tests.support.recorded import Recorded
from tests.support.replies import Reply, json_reply

MODEL = "m"
TEMPLATE = "{{ t }}"
MAX_NAME = (
    255  # llama.cpp's fs_validate_filename: longer names answer 400 (279 chars were, measured)
)


class FakeSlots:
    def __init__(self, folder: Path, slots: int = 2) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.task: list[int | None] = [None] * slots
        self.tokens = [0] * slots
        self.files: dict[str, int] = {}
        self.next_task = 0
        self.n_ctx = 2048
        self.save_path = True
        self.actions: list[tuple[str, int, str]] = []
        self.odd: dict[str, Any] = {}  # fields laid over every save and restore answer
        self.prompt_ms = 1000.0  # what reading the start-up's 192-token prompt takes

    def run(self, slot: int, tokens: int) -> None:
        """A completion on `slot` that leaves `tokens` in its cache."""
        with self.lock:
            self.task[slot], self.next_task = self.next_task, self.next_task + 1
            self.tokens[slot] = tokens

    def restart(self, n_ctx: int = 2048) -> None:
        with self.lock:
            self.task, self.tokens = [None] * len(self.task), [0] * len(self.tokens)
            self.next_task, self.n_ctx = 0, n_ctx

    def slots(self, _request: Recorded) -> Reply:
        with self.lock:
            return json_reply(200, [
                {"id": i, "is_processing": False, "n_prompt_tokens": n}
                | ({} if t is None else {"id_task": t})
                for i, (t, n) in enumerate(zip(self.task, self.tokens, strict=True))
            ])  # fmt: skip

    def props(self, _request: Recorded) -> Reply:
        return json_reply(200, {"chat_template": TEMPLATE, "total_slots": len(self.task),
                                "default_generation_settings": {"n_ctx": self.n_ctx}})  # fmt: skip

    def action(self, request: Recorded) -> Reply:
        slot, what, name = int(request.path.rsplit("/", 1)[1]), request.query["action"], ""
        if not self.save_path:
            return json_reply(501, {"error": {"code": 501, "message": "not supported"}})
        name = request.json["filename"]
        if len(name) > MAX_NAME:
            return json_reply(400, {"error": {"code": 400, "message": "Invalid filename"}})
        with self.lock:
            self.actions.append((what, slot, name))
            if what == "save":
                n = self.files[name] = self.tokens[slot]
                path = self.folder / name
                path.write_bytes(b"x" * n)
                at = time.time() - 30 + len(self.actions)  # mtime: the save's order
                os.utime(path, (at, at))
                return json_reply(
                    200, {"n_saved": n, "n_written": n, "timings": {"save_ms": 1.5}} | self.odd
                )
            if name not in self.files:
                return json_reply(400, {"error": {"code": 400, "message": "Unable to restore"}})
            n = self.tokens[slot] = self.files[name]
            return json_reply(
                200, {"n_restored": n, "n_read": n, "timings": {"restore_ms": 0.5}} | self.odd
            )

    def completion(self, request: Recorded) -> Reply:
        """POST /completion (the keeper's prompt rate): the prompt read into its slot."""
        body = request.json
        assert isinstance(body, dict)
        self.run(body["id_slot"], 192)
        return json_reply(200, {"timings": {"prompt_n": 192, "prompt_ms": self.prompt_ms}})


def config(folder: Path, **cache: Any) -> Config:
    table = {
        "inference": {"socket": str(folder / "infer.sock"), "model": MODEL, "slots": [0, 1],
                      "control_timeout_ms": 2000},
        "expect": {"chat_template_sha256": "0" * 64, "n_ctx": 2048, "total_slots": 2},
        "paths": {"home": str(folder / "home")},
        "cache": {"slot_save": True, "min_tokens": 10, "idle_save_ms": 60_000,
                  "folder": str(folder / "slots")} | cache,
    }  # fmt: skip
    return parse_config(toml_dumps(table), "t.toml", folder, {})


def keeper(folder: Path, warned: list[str], **cache: Any) -> CacheKeeper:
    cfg = config(folder, **cache)
    said: list[str] = []
    made = open_keeper(cfg, SlotGate(8), Client(cfg.inference).props, said.append, warned.append)
    assert made is not None, said
    assert said[0].startswith("selftest ok      slot_save: a save of slot "), said
    return made
