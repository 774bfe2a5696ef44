"""Smoke tests of the real-llama-server harness (tests/support/llama.py) and of the local profile's
chat template (conf/templates/chatml-tools.jinja), in single-model and router mode.

They need the real server: when it cannot be built the fixtures raise, so the tests fail; they
never skip. Requests carry every field the client sends (tests/support/loopd/llama_requests.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.verify.stack import free_port
from tests.support import llama, rawhttp
from tests.support.llama import (
    DEFAULT_TEMPLATE,
    MODEL_ID,
    LlamaServer,
    LlamaServerError,
    ensure_built,
)
from tests.support.loopd.llama_requests import (
    FORCE_TOOL,
    LONG_ESSAY,
    SYSTEM,
    WEATHER_TOOL,
    chat_body,
    fold,
)
from tests.support.procs import wait_for

CTX = 1024
SLOTS = 2
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module", params=["single", "router"])
def server(request: pytest.FixtureRequest) -> Iterator[LlamaServer]:
    with LlamaServer(mode=request.param, ctx=CTX, slots=SLOTS) as srv:
        yield srv


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


# ----- the harness, in both modes -----


def test_health_is_ready(server: LlamaServer) -> None:
    res = server.call("GET", "/health")
    assert res.status == 200
    assert res.json() == {"status": "ok"}


def test_props_describe_the_server_started(server: LlamaServer) -> None:
    props = server.call("GET", server.path("/props")).json()
    # The server keeps the file's text minus its final newline (Jinja's keep_trailing_newline).
    assert props["chat_template"] == DEFAULT_TEMPLATE.read_text().removesuffix("\n")
    assert props["default_generation_settings"]["n_ctx"] == CTX
    assert props["total_slots"] == SLOTS


def test_slots_answer_one_entry_per_slot(server: LlamaServer) -> None:
    res = server.call("GET", server.path("/slots"))
    assert res.status == 200
    assert [(s["id"], s["n_ctx"]) for s in res.json()] == [(i, CTX) for i in range(SLOTS)]


def test_streamed_chat_is_chunked_sse_with_deltas_and_a_finish(server: LlamaServer) -> None:
    res = server.call("POST", CHAT, chat_body(user("Say hello."), max_tokens=16, thinking=False))
    assert res.status == 200
    assert res.chunked
    assert res.header("Content-Type") == "text/event-stream"
    assert rawhttp.sse_data(res.content())[-1] == "[DONE]"
    got = fold(res)
    assert got["content"].strip()
    assert got["n_progress"] >= 1  # return_progress is honoured
    assert got["finish"] in ("stop", "length")
    assert len(got["ids"]) == 1  # every chunk carries the one completion id


def test_a_prompt_that_does_not_fit_is_a_plain_json_400(server: LlamaServer) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 120  # about 1,200 tokens > CTX
    res = server.call("POST", CHAT, chat_body(user(text), max_tokens=4, thinking=False))
    assert res.status == 400
    error = res.json()["error"]
    assert (error["type"], error["n_ctx"]) == ("exceed_context_size_error", CTX)
    assert error["n_prompt_tokens"] > CTX


# ----- the local profile's template (issue 4, item 7), in both modes -----


def test_thinking_is_on_or_off_per_request(server: LlamaServer) -> None:
    on = fold(
        server.call("POST", CHAT, chat_body(user("What is 2+2?"), max_tokens=24, thinking=True))
    )
    off = fold(
        server.call("POST", CHAT, chat_body(user("What is 2+2?"), max_tokens=24, thinking=False))
    )
    assert on["reasoning"]
    assert not off["reasoning"]
    assert off["content"]


def test_reasoning_end_moves_a_long_reasoning_block_to_the_answer(server: LlamaServer) -> None:
    body = chat_body(user(LONG_ESSAY), max_tokens=40, thinking=True, slot=1)
    request = rawhttp.build_request(
        "POST", CHAT, host=server.host, port=server.port, body=rawhttp.json_body(body)
    )
    raw = bytearray()
    answer = None
    for piece in rawhttp.stream(server.host, server.port, request):
        raw += piece
        if answer is None and raw.count(b'"reasoning_content"') >= 6:
            first = raw.split(b"data: ", 2)[1].split(b"\n", 1)[0]
            control = {"model": MODEL_ID, "id": json.loads(first)["id"], "action": "reasoning_end"}
            answer = server.call("POST", "/v1/chat/completions/control", control)
    assert answer is not None
    assert answer.json() == {"success": True}
    got = fold(rawhttp.parse_response(bytes(raw)))
    assert got["n_reasoning"] >= 6
    assert got["content"]
    assert got["finish"] == "length"


def test_forced_tool_calls_parse_for_ten_different_prompts(server: LlamaServer) -> None:
    cities = [
        "Paris",
        "London",
        "Tokyo",
        "Berlin",
        "Madrid",
        "Rome",
        "Oslo",
        "Cairo",
        "Lima",
        "Seoul",
    ]
    if server.mode == "router":
        cities = cities[:3]  # the same child server behind the router: a few show the path works
    parsed = []
    for city in cities:
        messages = [*user(f"What is the weather in {city}?"), FORCE_TOOL]
        body = chat_body(messages, max_tokens=48, thinking=False, tools=[WEATHER_TOOL])
        got = fold(server.call("POST", CHAT, body))
        calls = list(got["calls"].values())
        if got["finish"] == "tool_calls" and len(calls) == 1 and calls[0]["name"] == "get_weather":
            parsed.append(json.loads(calls[0]["arguments"]))
    assert len(parsed) == len(cities)
    assert all(isinstance(args.get("city"), str) for args in parsed)


# ----- router mode -----


def test_router_loads_the_model_on_the_first_request() -> None:
    with LlamaServer(mode="router", ctx=CTX, slots=1) as srv:
        assert srv.model_status() == "unloaded"
        missing = srv.call("GET", "/slots")
        assert missing.status == 400
        assert missing.json()["error"]["message"] == "model name is missing from the request"
        got = fold(srv.call("POST", CHAT, chat_body(user("Hi"), max_tokens=4, thinking=False)))
        assert got["finish"] in ("stop", "length")
        assert srv.model_status() == "loaded"


def test_kill_takes_the_routers_child_servers_with_it() -> None:
    srv = LlamaServer(mode="router", ctx=CTX, slots=1).start()
    try:
        srv.load()
        pgid = srv.pid
        assert pgid is not None
        assert len(_group_members(pgid)) >= 2  # the router and the model's child server
        srv.kill()
        wait_for(lambda: not _group_members(pgid), f"process group {pgid} to be gone", 10)
        assert not srv.running
    finally:
        srv.kill()
        srv.cleanup()


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group `pgid`, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


# ----- life cycle, and failures that say what was wrong -----


def test_a_server_that_exits_at_start_raises_with_its_log() -> None:
    srv = LlamaServer(extra_args=("--no-such-flag",))
    with pytest.raises(LlamaServerError, match=r"exited with code \d+ before it was ready") as exc:
        srv.start()
    assert "--no-such-flag" in str(exc.value)
    assert not srv.running
    srv.cleanup()


def test_a_port_taken_before_the_server_binds_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = [taken.getsockname()[1], free_port()]
        monkeypatch.setattr(llama, "free_port", lambda: ports.pop(0))
        with LlamaServer(slots=1) as srv:
            assert srv.call("GET", "/health").status == 200
            assert srv.port != taken.getsockname()[1]
            assert srv.log_path.read_text().count("--- start ") == 2


def test_stop_ends_the_process_with_sigterm() -> None:
    srv = LlamaServer(slots=1).start()
    pid = srv.pid
    assert pid is not None
    code = srv.stop()
    srv.cleanup()
    assert code in (0, -signal.SIGTERM)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_ensure_built_returns_the_binary_and_the_model() -> None:
    built = ensure_built()
    assert os.access(built.binary, os.X_OK)
    assert built.model.stat().st_size > 50_000_000  # the 135M model is about 98 MB
    assert (built.templates / "Qwen-QwQ-32B.jinja").is_file()


# ----- the committed recordings (scripts/record.py) -----

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"


def test_every_recording_is_a_whole_response_listed_in_the_index() -> None:
    index = json.loads((RECORDINGS / "index.json").read_text())["recordings"]
    on_disk = {p.name for p in RECORDINGS.iterdir()} - {"index.json", "README.md"}
    listed = {e["file"] for e in index.values()} | {e["request"] for e in index.values()}
    assert on_disk == listed - {None}
    for name, entry in index.items():
        raw = (RECORDINGS / entry["file"]).read_bytes()
        res = rawhttp.parse_response(raw)
        assert (res.status, len(raw)) == (entry["status"], entry["bytes"]), name
        res.content()  # framing intact: a cut or edited chunk raises here
        if entry["request"]:
            json.loads((RECORDINGS / entry["request"]).read_bytes())


def test_dechunk_refuses_a_cut_body() -> None:
    body = b"5\r\nhello\r\n0\r\n\r\n"
    assert rawhttp.dechunk(body) == b"hello"
    for cut in range(len(body)):
        with pytest.raises(ValueError, match="chunk"):
            rawhttp.dechunk(body[:cut])
