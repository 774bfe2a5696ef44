"""Issue 9: the llama client against a hostile upstream, through the real inferproxy.

The chain is the production one: `Client.chat` in a child process
(tests/support/loopd/hostile_client.py) -> infer.sock -> `python -m boxmaker.inferproxy` -> TCP -> a
scripted hostile server (tests/support/loopd/hostile.py) that writes raw bytes. Every limit is set
small through the config (LIMITS). Each case must end in the typed InferError it calls for, within
the configured time limits, with the chat's own peak RSS (resource.getrusage in the child that ran
it) under MEMORY_BOUND_KB. The floods are finite but far larger than that bound, so a client that
does not stop fails on memory and on its outcome, rather than hanging.

The named cases are the issue's, and the ones around them; `test_generated_upstreams` draws more
from random heads, lengths, chunk sizes, JSON shapes and endings (hypothesis, bounded examples).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.support.client import chunk_obj
from tests.support.feed import pieces_at
from tests.support.loopd import hostile_rig
from tests.support.loopd.hostile import (
    STREAM_HEAD,
    Peer,
    Script,
    chunk,
    event,
    head_then,
    reset_after,
    send,
    stream_head,
    then_hold,
)
from tests.support.loopd.hostile_rig import LIVENESS_S, Rig, check_bounds

rig = hostile_rig.rig  # the module-scoped fixture, bound by assignment

# ---- replies -----------------------------------------------------------------------------------


def payload(**kw: Any) -> bytes:
    return orjson.dumps(chunk_obj(**kw))


GOOD_EVENTS = (
    event(payload(content="hi", predicted=1))
    + event(payload(finish="stop", predicted=2))
    + event(b"[DONE]")
    + chunk(b"")
)
GOOD = STREAM_HEAD + GOOD_EVENTS
DELTA = STREAM_HEAD + event(payload(content="par", predicted=1))
PING = chunk(b": ping\n\n")


def tool(i: int, args: str = "") -> dict[str, Any]:
    return {"index": i, "id": f"call{i}", "function": {"name": "f", "arguments": args}}


BIG = "x" * 60_000  # sent with a predicted_n that stays at 1, so no token count stops it
GZIP_BODY = gzip.compress(b"data: " + payload(content="hi", predicted=1) + b"\n\n")


@dataclass(frozen=True)
class Case:
    script: Script
    tag: str
    match: str
    at_least_s: float = 0.0  # a limit never fires early
    at_once: bool = False  # refused from the bytes alone, before liveness_ms could fire
    flood: int = 0  # bytes the script would send in all; the client must stop it well before


CASES: dict[str, Case] = {
    # -- heads --
    "continue-for-ever": Case(
        lambda p: p.repeat(b"HTTP/1.1 100 Continue\r\n\r\n", 100_000),
        "protocol",
        "more than 4 interim",
        flood=2_500_000,
    ),
    "switching-protocols": Case(
        send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", GOOD), "protocol", "101"
    ),
    "early-hints-over-the-cap": Case(
        send((b"HTTP/1.1 103 Early Hints\r\nLink: " + b"a" * 1500 + b"\r\n\r\n") * 3, GOOD),
        "protocol",
        "heads longer than 4096 bytes in all",
    ),
    "not-http-then-close": Case(send(b"garbage garbage\r\n"), "protocol", "not an HTTP/1.x"),
    "tls-bytes-then-hold": Case(
        then_hold(send(b"\x16\x03\x01\x00\xa5\x01")), "protocol", "not an", at_once=True
    ),
    "cut-inside-the-head": Case(send(b"HTTP/1.1 200 OK\r\nContent-Ty"), "protocol", "inside the"),
    "close-before-any-byte": Case(lambda p: None, "connect", "without answering"),
    "reset-before-any-byte": Case(lambda p: p.reset(), "connect", "without answering"),
    "head-dripped": Case(
        lambda p: p.drip(GOOD, 0.05), "stalled", "head was not complete", at_least_s=LIVENESS_S
    ),
    "head-over-the-cap": Case(
        then_hold(send(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 1000)),
        "protocol",
        "longer than",
        at_once=True,
    ),
    "status-code-2000": Case(send(b"HTTP/1.1 2000 OK\r\n\r\n"), "protocol", "status line"),
    "gzip-stream": Case(
        send(stream_head(b"Content-Encoding: gzip", chunked=False), GZIP_BODY),
        "protocol",
        "Content-Encoding: gzip",
    ),
    "gzip-transfer-coding": Case(
        send(stream_head(b"Transfer-Encoding: gzip"), GOOD_EVENTS), "protocol", "Transfer-Encoding"
    ),
    "chunk-size-overflow": Case(send(STREAM_HEAD, b"f" * 40 + b"\r\n"), "protocol", "chunked body"),
    "json-not-a-stream": Case(
        send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"),
        "protocol",
        "not a stream",
    ),
    "error-body-dripped": Case(
        head_then(
            b"HTTP/1.1 500 Oops\r\nContent-Length: 5000\r\n\r\n",
            lambda p: p.drip(b"x" * 5000, 0.05),
        ),
        "http",
        "HTTP 500: xxx",
        at_least_s=LIVENESS_S,
    ),
    # -- liveness --
    "pings-after-one-delta": Case(
        head_then(DELTA, lambda p: p.repeat(PING, 400, 0.05)),
        "stalled",
        "no progress",
        at_least_s=LIVENESS_S,
    ),
    "stream-dripped": Case(lambda p: p.drip(GOOD, 0.02, step=8), "stalled", "liveness_ms"),
    "empty-events": Case(
        head_then(DELTA, lambda p: p.repeat(event(b"{}"), 1000, 0.02)),
        "stalled",
        "no progress",
        at_least_s=LIVENESS_S,
    ),
    "same-progress-again": Case(
        head_then(STREAM_HEAD, lambda p: p.repeat(event(payload(progress=(90, 0, 9))), 400, 0.02)),
        "stalled",
        "no progress",
        at_least_s=LIVENESS_S,
    ),
    "empty-deltas": Case(
        head_then(DELTA, lambda p: p.repeat(event(payload(content="", predicted=1)), 400, 0.02)),
        "stalled",
        "no progress",
        at_least_s=LIVENESS_S,
    ),
    "endless-trailers": Case(
        head_then(DELTA + b"0\r\n", lambda p: p.repeat(b"X-T: y\r\n", 2000, 0.01)),
        "stalled",
        "no progress",
    ),
    "silence-after-the-head": Case(then_hold(send(STREAM_HEAD)), "stalled", "no progress"),
    # -- what one completion may hold --
    "content-flood": Case(
        head_then(STREAM_HEAD, lambda p: p.repeat(event(payload(content=BIG, predicted=1)), 2000)),
        "protocol",
        "max_content_bytes = 262144",
        flood=120_000_000,
    ),
    "reasoning-flood": Case(
        head_then(
            STREAM_HEAD, lambda p: p.repeat(event(payload(reasoning=BIG, predicted=1)), 2000)
        ),
        "protocol",
        "max_reasoning_bytes = 262144",
        flood=120_000_000,
    ),
    "tool-call-index-flood": Case(
        head_then(
            STREAM_HEAD,
            lambda p: p.send_all(event(payload(tool_calls=[tool(i)])) for i in range(300_000)),
        ),
        "protocol",
        "more than 16 tool calls",
        flood=50_000_000,
    ),
    "tool-argument-flood": Case(
        head_then(
            STREAM_HEAD,
            lambda p: p.repeat(event(payload(tool_calls=[tool(0, BIG)], predicted=1)), 2000),
        ),
        "protocol",
        "max_tool_call_bytes",
        flood=120_000_000,
    ),
    "tokens-past-max-tokens": Case(
        head_then(
            STREAM_HEAD,
            # 256 bytes a token: 513 tokens stay under max_content_bytes, and the flood is as
            # large as the others, so what the kernel buffers on loopback (tcp_rmem can grow to
            # 32 MiB) is not taken for what the client read.
            lambda p: p.send_all(
                event(payload(content="a" * 256, predicted=n)) for n in range(1, 225_000)
            ),
        ),
        "protocol",
        "past max_tokens = 512",
        flood=120_000_000,
    ),
    "endless-sse-line": Case(
        head_then(STREAM_HEAD + chunk(b"data: "), lambda p: p.repeat(chunk(b"a" * 4096), 30_000)),
        "protocol",
        "event stream",
        flood=120_000_000,
    ),
    "data-lines-without-a-blank-line": Case(
        head_then(STREAM_HEAD, lambda p: p.repeat(chunk(b"data: {}\n" * 512), 30_000)),
        "protocol",
        "event stream",
        flood=130_000_000,
    ),
    # -- shapes --
    "deep-json": Case(send(STREAM_HEAD, event(b"[" * 10_000 + b"]" * 10_000)), "protocol", "JSON"),
    "content-not-a-string": Case(
        send(STREAM_HEAD, event(b'{"choices":[{"delta":{"content":5}}]}')), "protocol", "type"
    ),
    "prompt-past-its-total": Case(
        send(STREAM_HEAD, event(payload(progress=(10, 0, 11)))), "protocol", "11 of 10"
    ),
    # -- cut short --
    "reset-mid-stream": Case(reset_after(DELTA), "stream_closed_early", ""),
    "lying-content-length": Case(
        send(
            stream_head(b"Content-Length: 100000", chunked=False),
            b"data: " + payload(content="a", predicted=1) + b"\n\n",
        ),
        "stream_closed_early",
        "Content-Length",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_case(rig: Rig, name: str) -> None:
    case = CASES[name]
    r = rig.run(name, case.script)
    check_bounds(r)
    assert (r.outcome, r.tag) == ("error", case.tag), r
    assert case.match in r.message, r
    assert r.elapsed_s >= case.at_least_s, r
    if case.at_once:
        assert r.elapsed_s < LIVENESS_S, r
    if case.flood:
        assert r.served.sent < case.flood // 4, f"the client read {r.served.sent} bytes: {r}"


def test_a_good_stream_still_completes(rig: Rig) -> None:
    # The control: the same rig, an honest server.
    r = rig.run("good", send(GOOD))
    check_bounds(r)
    assert (r.outcome, r.message) == ("completion", "2 chars"), r


# ---- the generated family ----------------------------------------------------------------------

text = st.text(max_size=12)
json_leaf = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | text
json_any = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c, max_size=3),
    max_leaves=6,
)
count = st.integers(0, 600) | json_any
tool_delta = st.fixed_dictionaries(
    {"index": st.integers(0, 40) | json_any},
    optional={
        "id": text | json_any,
        "function": st.fixed_dictionaries(
            {}, optional={"name": text, "arguments": text | json_any}
        ),
    },
)
delta = st.fixed_dictionaries(
    {},
    optional={
        "content": text | json_any,
        "reasoning_content": text | json_any,
        "tool_calls": st.lists(tool_delta, max_size=3) | json_any,
    },
)
choice = st.fixed_dictionaries(
    {"delta": delta | json_any},
    optional={"finish_reason": st.sampled_from([None, "stop", "length", "tool_calls", "x"])},
)
stream_chunk = st.fixed_dictionaries(
    {"choices": st.lists(choice, min_size=1, max_size=1) | json_any},
    optional={
        "id": text | json_any,
        "timings": st.fixed_dictionaries(
            {"cache_n": count, "prompt_n": count, "predicted_n": count}
        ),
        "prompt_progress": st.fixed_dictionaries(
            {"total": count, "cache": count, "processed": count}
        ),
        "error": json_any,
    },
)
# One SSE event or line, and how often it comes in a row (a few floods among them).
sse_piece = st.tuples(
    st.one_of(
        # json, not orjson: it writes what orjson refuses (ints past 64 bits, NaN, lone surrogates)
        stream_chunk.map(lambda c: b"data: " + json.dumps(c).encode() + b"\n\n"),
        st.sampled_from([b": ping\n\n", b"data: [DONE]\n\n", b"\n", b"event: x\n", b"data: {"]),
        st.binary(max_size=20),
    ),
    st.integers(1, 3) | st.sampled_from([200, 3000]),
)
header = st.one_of(
    st.sampled_from(
        [
            b"Content-Type: text/event-stream",
            b"Content-Type: application/json",
            b"Transfer-Encoding: chunked",
            b"Transfer-Encoding: gzip, chunked",
            b"Content-Encoding: gzip",
            b"Content-Encoding: identity",
            b"Connection: close",
        ]
    ),
    st.integers(0, 2**70).map(lambda n: b"Content-Length: %d" % n),
    st.binary(max_size=24),
)
status_line = st.one_of(
    st.builds(
        lambda code, reason: b"HTTP/1.1 %d %s" % (code, reason),
        st.integers(100, 599),
        st.sampled_from([b"OK", b"", b"Weird Reason"]),
    ),
    st.binary(max_size=16),
)
STREAM_HEADERS = [b"Content-Type: text/event-stream", b"Transfer-Encoding: chunked"]
INTERIM = st.sampled_from([b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 E\r\n\r\n"])


@st.composite
def replies(draw: st.DrawFn) -> tuple[bytes, list[int], float, str]:
    """A response's bytes, where to cut them, the pause between pieces, and how it ends."""
    # Mostly the head of a stream, so that the body is read; one time in ten anything.
    odd = draw(st.integers(0, 9)) == 0
    status = draw(status_line) if odd else b"HTTP/1.1 200 OK"
    lines = draw(st.lists(header, max_size=5)) if odd else STREAM_HEADERS
    extra = draw(st.lists(header, max_size=2)) if draw(st.integers(0, 4)) == 0 else []
    head = b"\r\n".join([status, *lines, *extra, b"", b""])
    interim = draw(st.lists(INTERIM, max_size=6)) if draw(st.integers(0, 9)) == 0 else []
    body = b"".join(data * times for data, times in draw(st.lists(sse_piece, max_size=8)))
    if draw(st.integers(0, 3)):  # mostly chunked framing, at random sizes
        cuts = draw(st.lists(st.integers(0, len(body)), max_size=6))
        body = b"".join(chunk(p) for p in pieces_at(body, cuts) if p) + draw(
            st.sampled_from([chunk(b""), b"0\r\n", b""])
        )
    data = b"".join(interim) + head + body
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=6))
    pause = draw(st.sampled_from([0.0, 0.0, 0.005, 0.02]))
    return data, sorted(cuts), pause, draw(st.sampled_from(["close", "close", "reset", "hold"]))


def script_of(data: bytes, cuts: list[int], pause: float, end: str) -> Script:
    def script(peer: Peer) -> None:
        peer.send_all((p for p in pieces_at(data, cuts) if p), pause)
        if end == "hold":
            peer.hold(10.0)
        elif end == "reset":
            peer.reset()

    return script


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(reply=replies())
def test_generated_upstreams(rig: Rig, reply: tuple[bytes, list[int], float, str]) -> None:
    data, cuts, pause, end = reply
    note(f"{len(data)} bytes, ending {end}: {data[:300]!r}")
    r = rig.run("generated", script_of(data, cuts, pause, end))
    check_bounds(r)
    if data and end != "reset":  # a reset may drop bytes in flight
        assert r.tag != "connect", f"a byte came, so the server answered: {r}"
    if not b"HTTP/1.".startswith(data[:7]):
        assert (r.outcome, r.tag) == ("error", "protocol"), r
