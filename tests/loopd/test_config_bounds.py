"""A config that loads must run (issue 9, item 2): every value is bounded where it is loaded.

Each number kind has a maximum: the largest value loads and the client can use it (a request is
built and encoded, every wait set on a real socket and a real lock); one more is refused. Tables
sent to the server have a nesting limit. A generated family of values ends the same way: a
usable config, or a one-line ConfigError. The file itself (a regular file of at most 1 MiB, one
line per failure, exit status 1 from loopd) is test_config_file.py's.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import random
import socket
import threading
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxmaker._config import kinds as _kinds
from boxmaker._fast.sse import SSELineSplitter
from boxmaker.loopd.config import Config, ConfigError
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import Stalled
from boxmaker.loopd.llama.request import chat_body
from boxmaker.loopd.llama.retry import RetryPolicy
from boxmaker.loopd.llama.types import ChatRequest
from boxmaker.loopd.llama.waits import FirstByteWait, SlotView, WaitLimits
from boxmaker.loopd.selftest import cache_requests, tool_call_request
from boxmaker.proto import UserMessage
from tests.support.loopd.config import error, leaf_keys, parse, set_key, text

LEAF_KEYS = leaf_keys()


def kind_of(dotted: str) -> _kinds.Kind:
    """The Kind a key is declared with, read off the dataclasses' annotations."""
    cls: Any = Config
    *sections, name = dotted.split(".")
    for section in sections:
        cls = typing.get_type_hints(cls)[section]
    hint = typing.get_type_hints(cls, include_extras=True)[name]
    return next(x for x in hint.__metadata__ if isinstance(x, _kinds.Kind))


def keys_of(kind: _kinds.Kind) -> list[str]:
    return [k for k in LEAF_KEYS if kind_of(k) is kind]


# ---- what "the client can use it" means ---------------------------------------------------------


def config_values(config: object) -> dict[str, Any]:
    """Every leaf value by its field name's suffix, sections walked."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            found |= {f"{f.name}.{k}": v for k, v in config_values(value).items()}
        else:
            found[f.name] = value
    return found


def waits_ms(config: Config) -> list[int]:
    values = config_values(config)
    singles = [v for k, v in values.items() if k.endswith("_ms") and isinstance(v, int)]
    return singles + list(config.inference.retry_delays_ms)


def os_error(call: Callable[[], object]) -> OSError | None:
    try:
        call()
    except OSError as exc:
        return exc
    return None


def assert_connect_fails_cleanly(path: Path) -> None:
    # The configured socket path is usable as an address: connecting fails (nobody listens
    # there) with an errno, never with "AF_UNIX path too long" or "embedded null byte".
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        err = os_error(functools.partial(sock.connect, str(path)))
        assert err is None or err.errno is not None, err


def assert_usable(config: Config) -> None:
    """What the client and the self-test do with the values, short of a server."""
    inf = config.inference
    plain = ChatRequest(inf.slots[0], (UserMessage("hi"),), (), thinking=True)
    for req, extra in (
        (plain, None),
        tool_call_request(config),
        cache_requests(config),
    ):
        assert orjson.loads(chat_body(req, inf, extra))["max_tokens"] >= 1
    a, b = socket.socketpair()
    lock = threading.Lock()
    try:
        for ms in waits_ms(config):
            a.settimeout(ms / 1000)  # every socket wait: 10**13 ms overflowed here
            assert lock.acquire(timeout=ms / 1000)
            lock.release()
    finally:
        a.close()
        b.close()
    policy = RetryPolicy.from_config(inf)
    rng = random.Random(1)
    for failed in range(1, inf.retry_attempts + 1):
        delay = policy.next_delay(failed, 0.0, Stalled("x"), rng)
        assert delay is None or 0 <= delay <= 2 * _kinds.MAX_MS
    started = time.monotonic()
    wait = FirstByteWait(WaitLimits.from_config(inf), inf.slots[0], started)
    for view in SlotView:
        wait.observe(started + 2 * _kinds.MAX_MS / 1000, view)
    SSELineSplitter(inf.max_sse_line_bytes)
    Client(inf)
    for path in (inf.socket, config.channel.socket):
        assert_connect_fails_cleanly(path)
    for path in (config.paths.home, config.baseline.system):
        err = os_error(functools.partial(os.stat, path))
        assert err is None or err.errno is not None, err


def test_the_defaults_are_usable() -> None:
    assert_usable(parse(text()))


def test_the_usability_check_catches_an_unbounded_wait() -> None:
    # The check itself can fail: the value that crashed the transport before the bound.
    config = parse(text())
    unbounded = dataclasses.replace(config.inference, liveness_ms=10**13)
    with pytest.raises(OverflowError):
        assert_usable(dataclasses.replace(config, inference=unbounded))


# ---- each number kind at its maximum, and one past it ------------------------------------------

BOUNDED = [
    (key, kind, top)
    for kind, top in ((_kinds.MS, _kinds.MAX_MS), (_kinds.BYTES, _kinds.MAX_BYTES))
    for key in keys_of(kind)
] + [(key, _kinds.TOKENS, _kinds.MAX_TOKENS) for key in keys_of(_kinds.TOKENS)]


def test_every_number_kind_has_keys() -> None:
    kinds = {kind for _, kind, _ in BOUNDED}
    assert kinds == {_kinds.MS, _kinds.BYTES, _kinds.TOKENS}
    assert "inference.liveness_ms" in {key for key, _, _ in BOUNDED}


@pytest.mark.parametrize(("dotted", "top"), [(key, top) for key, _, top in BOUNDED])
def test_the_maximum_loads_and_runs_and_one_more_is_refused(dotted: str, top: int) -> None:
    assert_usable(parse(set_key(dotted, str(top))))
    exc = error(set_key(dotted, str(top + 1)))
    assert exc.key == dotted
    assert f"must be an integer from 1 to {top} (" in str(exc)
    assert str(exc).endswith(f"got {top + 1}")


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("inference.liveness_ms", "10000000000000"),
        ("inference.max_tokens", str(2**64)),
        ("inference.retry_delays_ms", "[0, 0, 86400001]"),
        ("inference.sampling.top_k", str(2**64)),
        ("inference.sampling.temperature", "1e308"),
        ("inference.queue_length", str(2**63)),
        ("inference.slots", "[1024]"),
        ("expect.total_slots", str(2**40)),
        ("loop.tool_iterations", "1001"),
        ("selftest.temperature", "101"),
    ],
)
def test_values_that_loaded_and_crashed_are_refused(dotted: str, value: str) -> None:
    exc = error(set_key(dotted, value))
    assert exc.key == dotted
    assert "\n" not in str(exc)


# ---- tables sent to the server -------------------------------------------------------------------


def nested(depth: int) -> str:
    """An inline table `depth` levels deep in all: { a = { a = ... { a = 1 } } }."""
    return "{ a = " * (depth - 1) + "{ a = 1 }" + " }" * (depth - 1)


def test_tool_parameters_at_the_nesting_limit_load_and_encode() -> None:
    config = parse(set_key("selftest.tool_parameters", nested(_kinds.MAX_JSON_DEPTH)))
    assert_usable(config)


@pytest.mark.parametrize("depth", [_kinds.MAX_JSON_DEPTH + 1, 300])
def test_tool_parameters_nested_too_deep_are_refused(depth: int) -> None:
    exc = error(set_key("selftest.tool_parameters", nested(depth)))
    assert exc.key == "selftest.tool_parameters"
    assert f"nested more than {_kinds.MAX_JSON_DEPTH} deep, at a.a." in str(exc)


def test_arrays_count_towards_the_nesting_limit() -> None:
    deep = "[" * _kinds.MAX_JSON_DEPTH + "]" * _kinds.MAX_JSON_DEPTH
    exc = error(set_key("selftest.tool_parameters", f"{{ a = {deep} }}"))
    assert "nested more than 64 deep, at a.0.0." in str(exc)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("{ a = nan }", "got nan at a"),
        ("{ a = [1, -inf] }", "got -inf at a.1"),
        (f"{{ a = {{ b = {2**64} }} }}", "got an integer beyond 64 bits at a.b"),
        (f"{{ a = {-(2**63) - 1} }}", "got an integer beyond 64 bits at a"),
        ("{ a = 07:32:00 }", "got a time at a"),
    ],
)
def test_tool_parameters_must_be_json_orjson_writes(table: str, says: str) -> None:
    exc = error(set_key("selftest.tool_parameters", table))
    assert str(exc).endswith(says), str(exc)


def test_64_bit_integers_in_tool_parameters_are_fine() -> None:
    table = f"{{ a = {2**64 - 1}, b = {-(2**63)} }}"
    assert_usable(parse(set_key("selftest.tool_parameters", table)))


# ---- a generated family of values ---------------------------------------------------------------


def toml_string(value: str) -> str:
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return {math.inf: "inf", -math.inf: "-inf"}.get(value, repr(value))


EDGES = [0, 1, -1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 10**13, 10**30]
EDGES += [_kinds.MAX_MS, _kinds.MAX_BYTES, _kinds.MAX_TOKENS, _kinds.MAX_SLOTS]
EDGES += [e + 1 for e in EDGES[-4:]]
SCALARS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(EDGES).map(str),
    st.floats().map(toml_float),
    st.booleans().map(lambda b: "true" if b else "false"),
    st.text(max_size=12).map(toml_string),
    st.sampled_from(["1979-05-27", "07:32:00", "1979-05-27T07:32:00Z", '"/tmp/x.sock"']),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=4).map(
            lambda d: "{ " + ", ".join(f"{toml_string(k)} = {v}" for k, v in d.items()) + " }"
        ),
    ),
    max_leaves=12,
) | st.integers(min_value=1, max_value=120).map(nested)


NUMBER_KEYS = [k for k in LEAF_KEYS if "integer" in kind_of(k).expected]
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(EDGES),
    st.integers(min_value=0, max_value=2 * _kinds.MAX_MS),
).map(str)


def test_the_number_keys_are_found() -> None:
    assert {"inference.max_tokens", "inference.liveness_ms", "loop.tool_timeout_ms"} <= set(
        NUMBER_KEYS
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(LEAF_KEYS), value=VALUES)
def test_a_value_loads_into_a_usable_config_or_is_refused_in_one_line(key: str, value: str) -> None:
    check_one(key, value)


@pytest.mark.parametrize("key", NUMBER_KEYS)
@settings(max_examples=25, deadline=None)
@given(value=NUMBERS)
def test_a_number_loads_into_a_usable_config_or_is_refused_in_one_line(
    key: str, value: str
) -> None:
    check_one(key, value)


@pytest.mark.parametrize("key", NUMBER_KEYS)
def test_every_edge_number_loads_into_a_usable_config_or_is_refused(key: str) -> None:
    for edge in EDGES:
        check_one(key, str(edge))


def check_one(key: str, value: str) -> None:
    try:
        config: Config | ConfigError = parse(set_key(key, value))
    except ConfigError as exc:
        config = exc
    if isinstance(config, ConfigError):
        assert str(config).startswith("conf/loopd.toml: ")
        assert "\n" not in str(config)
    else:
        assert_usable(config)
