"""What loopd asks llama-server besides completions, and the cache-loss rule. [core]

The requests (`props_target`, `slots_target`, `tokenize_body`, `control_body`) always carry the
configured model id: a llama-server router answers /slots and /props without `?model=<id>` with
its own view or HTTP 400 "model name is missing from the request", and routes POST bodies by their
"model" key (issue 4, item 10). A single-model server ignores both. The parsers turn the answers
into small typed results and raise BadResponse, naming the field, when a shape is wrong. The
client (`llama.client`) and the chat loop (`llama.chat`) make the calls.

`cache_outcome` is the brief's pure function (section 4, "Cache loss").
"""

from dataclasses import dataclass
from typing import Any, Final

import orjson

from boxmaker.loopd.llama.errors import BadResponse
from boxmaker.loopd.llama.http import target
from boxmaker.proto import Timings, load_json, sha256_hex

PROPS_PATH: Final = "/props"
SLOTS_PATH: Final = "/slots"
TOKENIZE_PATH: Final = "/tokenize"
CONTROL_PATH: Final = "/v1/chat/completions/control"

# More than this many tokens short of the previous total is a cache loss (M2a brief, section 4).
CACHE_LOSS_SLACK_TOKENS: Final = 64


@dataclass(frozen=True, slots=True)
class Props:
    chat_template: str
    total_slots: int
    n_ctx: int  # per slot: default_generation_settings.n_ctx


@dataclass(frozen=True, slots=True)
class SlotState:
    id: int
    is_processing: bool
    n_ctx: int | None
    id_task: int | None = None  # the last completion task it ran (none on a fresh server)
    n_prompt_tokens: int = 0  # the tokens its cache holds


@dataclass(frozen=True, slots=True)
class SlotIO:
    """A slot save's or restore's answer: tokens, bytes written or read, the server's time."""

    tokens: int
    size: int
    elapsed_us: int


# The largest count or duration (us) kept from the server: a bigger number is cut to it where it
# enters, so every record, frame and state file that carries one can encode it (issue 24).
MAX_COUNT: Final = 2**53


def bounded(n: int) -> int:
    """A count from outside, cut into 0..MAX_COUNT."""
    return min(max(n, 0), MAX_COUNT)


def micros(ms: float) -> int:
    """A server's milliseconds as bounded microseconds (NaN as 0, past MAX_COUNT as MAX_COUNT)."""
    us = ms * 1000
    if not us >= 0:  # NaN too
        return 0
    return MAX_COUNT if us >= MAX_COUNT else round(us)


def template_sha256(chat_template: str) -> str:
    """The SHA-256 (hex) of a chat template, as [expect] and the save files' identity take it."""
    return sha256_hex(chat_template.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class CacheHit:
    pass


@dataclass(frozen=True, slots=True)
class CacheMiss:
    """A cache loss (the brief's word): `got` is more than 64 tokens short of `expected`.

    Not proto's CacheLoss, which is the log record a turn writes for one.
    """

    expected: int  # the previous request's total: what the cache should have held
    got: int  # this request's cache_n


CacheOutcome = CacheHit | CacheMiss


def cache_outcome(previous: Timings, current: Timings) -> CacheOutcome:
    """Whether `current` reused the cache that `previous` left.

    The slot held `previous.total` tokens after the previous request; a request that extends it
    should find nearly all of them cached. More than 64 tokens short is a loss.
    """
    expected = previous.total
    if expected - current.cache_n > CACHE_LOSS_SLACK_TOKENS:
        return CacheMiss(expected=expected, got=current.cache_n)
    return CacheHit()


# ---- requests ----------------------------------------------------------------------------------


def props_target(model: str) -> str:
    return target(PROPS_PATH, model=model)


def slots_target(model: str) -> str:
    return target(SLOTS_PATH, model=model)


def tokenize_body(model: str, text: str) -> bytes:
    return orjson.dumps({"model": model, "content": text})


def control_body(completion_id: str, model: str) -> bytes:
    """The body of POST /v1/chat/completions/control that ends the reasoning block."""
    return orjson.dumps({"id": completion_id, "action": "reasoning_end", "model": model})


# ---- answers -----------------------------------------------------------------------------------


def _load(body: bytes, path: str) -> Any:
    return load_json(body, f"{path}: the answer", lambda m: BadResponse(f"{m}: {body[:80]!r}"))


def _field(obj: object, key: str, kind: type, path: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise BadResponse(f"{path}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise BadResponse(f"{path}.{key}: expected {kind.__name__}, got {value!r:.80}")
    return value


def parse_props(body: bytes) -> Props:
    """GET /props: the chat template, the slot count and the per-slot context size."""
    obj = _load(body, "/props")
    settings = _field(obj, "default_generation_settings", dict, "/props")
    return Props(
        chat_template=_field(obj, "chat_template", str, "/props"),
        total_slots=_field(obj, "total_slots", int, "/props"),
        n_ctx=_field(settings, "n_ctx", int, "/props.default_generation_settings"),
    )


def parse_slots(body: bytes) -> tuple[SlotState, ...]:
    """GET /slots: each slot's id, whether it is processing, its n_ctx when given, and what its
    cache holds (`id_task`, `n_prompt_tokens`, bounded; a fresh server's slot holds nothing).
    The one /slots parser: the chat loop's waits and the cache keeper both use it."""
    items = _load(body, "/slots")
    if not isinstance(items, list):
        raise BadResponse(f"/slots: expected an array, got {items!r:.80}")
    slots = []
    for i, item in enumerate(items):
        path = f"/slots[{i}]"
        if not isinstance(item, dict):
            raise BadResponse(f"{path}: expected an object, got {item!r:.80}")
        n_ctx = _field(item, "n_ctx", int, path) if "n_ctx" in item else None
        task, tokens = item.get("id_task"), item.get("n_prompt_tokens")
        slots.append(
            SlotState(
                _field(item, "id", int, path),
                _field(item, "is_processing", bool, path),
                n_ctx,
                bounded(task) if type(task) is int else None,
                bounded(tokens) if type(tokens) is int else 0,
            )
        )
    return tuple(slots)


def parse_slot_io(body: bytes, action: str) -> SlotIO:
    """The answer to POST /slots/<id>?action=save or restore, every number bounded."""
    obj = _load(body, f"/slots?action={action}")
    tokens_key, size_key, ms_key = (
        ("n_saved", "n_written", "save_ms")
        if action == "save"
        else ("n_restored", "n_read", "restore_ms")
    )
    path = f"the {action} answer"
    timings = _field(obj, "timings", dict, path)
    ms = timings.get(ms_key)
    if type(ms) not in (int, float):
        raise BadResponse(f"{path}.timings: missing {ms_key!r} or not a number, got {ms!r:.80}")
    assert isinstance(ms, int | float)
    return SlotIO(
        bounded(_field(obj, tokens_key, int, path)),
        bounded(_field(obj, size_key, int, path)),
        micros(ms),
    )


def parse_tokenize(body: bytes) -> tuple[int, ...]:
    """POST /tokenize: the token ids."""
    tokens = _field(_load(body, "/tokenize"), "tokens", list, "/tokenize")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise BadResponse("/tokenize.tokens: expected an array of integers")
    return tuple(tokens)


def parse_control(body: bytes) -> tuple[bool, str | None]:
    """The control call's answer: (success, message). Anything not `success: true` is False."""
    obj = _load(body, CONTROL_PATH)
    if not isinstance(obj, dict):
        return False, f"not a JSON object: {body[:80]!r}"
    message = obj.get("message")
    return obj.get("success") is True, message if isinstance(message, str) else None


def parse_prompt_rate(body: bytes) -> float | None:
    """POST /completion's answer: microseconds per prompt token read (None: too few read)."""
    obj = _load(body, "/completion")
    timings = _field(obj, "timings", dict, "/completion")
    n, ms = timings.get("prompt_n"), timings.get("prompt_ms")
    if type(n) is not int or type(ms) not in (int, float) or n < 16:
        return None
    assert isinstance(ms, int | float)
    return micros(ms) / n
