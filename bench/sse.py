"""SSE splitting, the chunked decoder and the full stream path, against their peers.

One run, one table per part: the median time of several repetitions for each implementation on
the same bytes, as events/s and MB/s, and each as a ratio to the peer named in the issue. The
peers (the OpenAI SDK's SSE decoder, httpx-sse, httptools, h11) are the `bench` extra; the floor
is a bare memchr scan (bench/_floor.pyx) that builds no payloads.
"""

import codecs
import json
import statistics
import time
from collections.abc import Callable, Sequence

import h11
import httptools
import orjson
import pyximport  # type: ignore[import-untyped]
from httpx_sse._decoders import SSEDecoder as HttpxSSEDecoder
from httpx_sse._decoders import SSELineDecoder as HttpxSSELineDecoder
from openai._streaming import SSEDecoder as OpenAISSEDecoder

from boxmaker._fast import _chunked_c, _chunked_py, _sse_c, _sse_py

from . import stream

pyximport.install(language_level=3, inplace=False)
from . import _floor  # type: ignore[attr-defined]  # noqa: E402  (built on first use by pyximport)

REPEATS = 7
Reads = list[bytes]

# --- SSE splitting: reads of an event stream -> number of data payloads -------------------------


def split_c(reads: Reads) -> int:
    feed = _sse_c.SSELineSplitter().feed
    return sum(len(feed(r)) for r in reads)


def split_py(reads: Reads) -> int:
    feed = _sse_py.SSELineSplitter().feed
    return sum(len(feed(r)) for r in reads)


def split_openai(reads: Reads) -> int:
    return sum(1 for _ in OpenAISSEDecoder().iter_bytes(iter(reads)))


def split_httpx_sse(reads: Reads) -> int:
    # What httpx_sse.EventSource.iter_sse does over response.iter_text().
    text = codecs.getincrementaldecoder("utf-8")()
    lines = HttpxSSELineDecoder()
    sse = HttpxSSEDecoder()
    n = 0
    for r in reads:
        for line in lines.decode(text.decode(r)):
            if sse.decode(line) is not None:
                n += 1
    return n


def split_floor(reads: Reads) -> int:
    lines: int = _floor.count_lines(reads)
    return lines // 2  # two line ends per event


# --- full path: reads of a raw chunked HTTP response -> parsed JSON chunks ----------------------


def full_boxmaker(reads: Reads) -> int:
    chunked = _chunked_c.ChunkedDecoder()
    feed = _sse_c.SSELineSplitter().feed
    head: bytes | None = b""
    n = 0
    for r in reads:
        if head is not None:  # skip the status line and headers once
            head += r
            end = head.find(b"\r\n\r\n")
            if end < 0:
                continue
            r, head = head[end + 4 :], None
        for payload in feed(chunked.feed(r)):
            if payload != b"[DONE]":
                orjson.loads(payload)
                n += 1
    return n


def _httptools_bodies(reads: Reads):  # type: ignore[no-untyped-def]
    pending: list[bytes] = []

    class Proto:
        def on_body(self, body: bytes) -> None:
            pending.append(body)

    parser = httptools.HttpResponseParser(Proto())
    for r in reads:
        parser.feed_data(r)
        yield from pending
        pending.clear()


def _h11_bodies(reads: Reads):  # type: ignore[no-untyped-def]
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/v1/chat/completions", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    for r in reads:
        conn.receive_data(r)
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA or isinstance(ev, h11.EndOfMessage):
                break
            if isinstance(ev, h11.Data):
                yield bytes(ev.data)


def _openai_json(bodies) -> int:  # type: ignore[no-untyped-def]
    n = 0
    for sse in OpenAISSEDecoder().iter_bytes(bodies):
        if sse.data != "[DONE]":
            json.loads(sse.data)
            n += 1
    return n


def full_httptools_openai(reads: Reads) -> int:
    return _openai_json(_httptools_bodies(reads))


def full_h11_openai(reads: Reads) -> int:
    return _openai_json(_h11_bodies(reads))


# --- chunked decoding alone: reads of a chunked body (or whole response, for the peers) ---------


def chunked_c(reads: Reads) -> int:
    feed = _chunked_c.ChunkedDecoder().feed
    return sum(len(feed(r)) for r in reads)


def chunked_py(reads: Reads) -> int:
    feed = _chunked_py.ChunkedDecoder().feed
    return sum(len(feed(r)) for r in reads)


def chunked_httptools(reads: Reads) -> int:
    return sum(len(b) for b in _httptools_bodies(reads))


def chunked_h11(reads: Reads) -> int:
    return sum(len(b) for b in _h11_bodies(reads))


# --- the harness ---------------------------------------------------------------------------------


def measure(cases: Sequence[tuple[str, Callable[[Reads], int], Reads, int]]) -> dict[str, float]:
    """Median seconds per case. The repetitions are interleaved (one run of each case per round),
    so load from elsewhere on this shared machine falls on every case alike and the ratios hold."""
    times: dict[str, list[float]] = {name: [] for name, _, _, _ in cases}
    for _ in range(REPEATS):
        for name, fn, reads, expect in cases:
            t0 = time.perf_counter()
            got = fn(reads)
            times[name].append(time.perf_counter() - t0)
            if got != expect:
                raise AssertionError(f"{name} gave {got}, expected {expect}")
    return {name: statistics.median(ts) for name, ts in times.items()}


def table(title: str, rows: list[tuple[str, float, int, int]], baseline: str, unit: str) -> None:
    """rows: (name, seconds, units, bytes); ratios are to the row named `baseline`."""
    base = next(s for name, s, _, _ in rows if name == baseline)
    print(f"\n{title}")
    head = ("implementation", "median ms", unit + "/s", "MB/s", "vs " + baseline)
    print(f"  {head[0]:<34} {head[1]:>10} {head[2]:>14} {head[3]:>9} {head[4]:>22}")
    for name, s, units, nbytes in rows:
        rate, mbs, ratio = units / s, nbytes / s / 1e6, base / s
        print(f"  {name:<34} {s * 1e3:>10.2f} {rate:>14,.0f} {mbs:>9.1f} {ratio:>21.2f}x")


def main(argv: list[str] | None = None) -> None:
    evs = stream.events()
    sse = stream.sse_body(evs)
    n_events = len(evs)
    mb = len(sse) / 1e6
    print(f"bench sse: {n_events:,} events, {mb:.2f} MB of SSE; median of {REPEATS} rounds")

    splitters = (
        ("boxmaker SSELineSplitter (c)", split_c),
        ("boxmaker SSELineSplitter (py)", split_py),
        ("openai SSEDecoder", split_openai),
        ("httpx-sse", split_httpx_sse),
        ("floor: bare memchr scan", split_floor),
    )
    for size in (1024, 16384, 65536):
        reads = stream.reads(sse, size)
        med = measure([(name, fn, reads, n_events) for name, fn in splitters])
        rows = [(name, med[name], n_events, len(sse)) for name, _ in splitters]
        table(f"SSE splitting, {size // 1024} KiB reads", rows, "openai SSEDecoder", "events")
        print(f"  compiled vs httpx-sse: {med['httpx-sse'] / med[splitters[0][0]]:.2f}x")

    response = stream.HEAD + stream.chunked_body(evs)
    n_json = n_events - 1  # all but [DONE]
    paths = (
        ("chunked+SSE+orjson (boxmaker c)", full_boxmaker),
        ("httptools+openai SSE+json", full_httptools_openai),
        ("h11+openai SSE+json", full_h11_openai),
    )
    for size in (16384, 65536):
        reads = stream.reads(response, size)
        med = measure([(name, fn, reads, n_json) for name, fn in paths])
        rows = [(name, med[name], n_json, len(response)) for name, _ in paths]
        table(
            f"full path, chunked HTTP -> JSON chunks, {size // 1024} KiB reads",
            rows,
            "httptools+openai SSE+json",
            "events",
        )

    big = [bytes([65 + i % 26]) * (1 << 20) for i in range(8)]
    for label, pieces in (("many small chunks (one event each)", evs), ("8 chunks of 1 MiB", big)):
        body = stream.chunked_body(pieces)
        decoded = sum(len(p) for p in pieces)
        body_reads = stream.reads(body, 16384)
        resp_reads = stream.reads(stream.HEAD + body, 16384)
        cases = [
            ("ChunkedDecoder (c)", chunked_c, body_reads, decoded),
            ("ChunkedDecoder (py)", chunked_py, body_reads, decoded),
            ("httptools", chunked_httptools, resp_reads, decoded),
            ("h11", chunked_h11, resp_reads, decoded),
        ]
        med = measure(cases)
        rows = [(name, med[name], len(pieces), len(body)) for name, _, _, _ in cases]
        table(f"chunked decoding, {label}, 16 KiB reads", rows, "httptools", "chunks")


if __name__ == "__main__":
    main()
