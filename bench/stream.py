"""A synthetic stream shaped like llama-server's `/v1/chat/completions` with
`stream`, `return_progress` and `timings_per_token` on: `prompt_progress` chunks first, then one
`data:` event per token whose JSON carries `choices[0].delta.content` and a `timings` object,
a final chunk with `finish_reason`, and `data: [DONE]`. Every event is one HTTP chunk, as
llama-server writes them. Deterministic, so every run measures the same bytes.
"""

import random

import orjson

HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Keep-Alive: timeout=5, max=100\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Server: llama.cpp\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Access-Control-Allow-Origin: \r\n"
    b"\r\n"
)

WORDS = (
    " the",
    " model",
    " answer",
    ",",
    " is",
    " a",
    " token",
    " stream",
    ".",
    " and",
    " of",
    " llama",
    " café",
    " 42",
    "\n",
    " naïve",
    " ok",
    " server",
    " cache",
    " slot",
)


def _chunk(
    n: int, delta: dict[str, object], timings: dict[str, float], extra: dict[str, object]
) -> bytes:
    obj: dict[str, object] = {
        "choices": [
            {"finish_reason": extra.pop("finish_reason", None), "index": 0, "delta": delta}
        ],
        "created": 1764474517,
        "id": "chatcmpl-bench0000000000000000000000",
        "model": "SmolLM2-135M-Instruct",
        "system_fingerprint": "b11434-bench",
        "object": "chat.completion.chunk",
        "timings": timings,
        **extra,
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def events(n_tokens: int = 20_000, n_progress: int = 16, seed: int = 1) -> list[bytes]:
    """The SSE events (each `data: ...\\n\\n`) of one streamed completion."""
    rng = random.Random(seed)
    prompt_n = 4096
    out = []
    for i in range(1, n_progress + 1):
        processed = prompt_n * i // n_progress
        progress = {"total": prompt_n, "cache": 0, "processed": processed, "time_ms": 12.5 * i}
        timings = {"cache_n": 0, "prompt_n": processed, "prompt_ms": 12.5 * i}
        out.append(_chunk(0, {}, timings, {"prompt_progress": progress}))
    for n in range(1, n_tokens + 1):
        timings = {
            "cache_n": 0,
            "prompt_n": prompt_n,
            "prompt_ms": 200.25,
            "prompt_per_token_ms": 0.0488,
            "prompt_per_second": 20454.5,
            "predicted_n": n,
            "predicted_ms": round(n * 6.1 + rng.random(), 3),
            "predicted_per_token_ms": 6.1,
            "predicted_per_second": 163.9,
        }
        out.append(_chunk(n, {"content": rng.choice(WORDS)}, timings, {}))
    out.append(_chunk(n_tokens, {}, timings, {"finish_reason": "stop"}))
    out.append(b"data: [DONE]\n\n")
    return out


def sse_body(evs: list[bytes]) -> bytes:
    return b"".join(evs)


def chunked_body(pieces: list[bytes]) -> bytes:
    """Each piece as one chunk, then the last chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def reads(data: bytes, size: int) -> list[bytes]:
    """`data` as a socket would hand it over in reads of `size` bytes."""
    return [data[i : i + size] for i in range(0, len(data), size)]
