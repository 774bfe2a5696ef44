"""boxmaker.loopd.llama.info: the parsers over recorded answers, cache_outcome, and the client's
info calls against the fake server (which must carry the model id)."""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import BadResponse, HttpStatus
from boxmaker.loopd.llama.info import (
    CacheHit,
    CacheMiss,
    SlotState,
    cache_outcome,
    control_body,
    parse_control,
    parse_props,
    parse_slots,
    parse_tokenize,
)
from boxmaker.proto import Timings
from tests.support.client import (
    RECORDINGS,
    at,
    make_config,
    read_recording,
)
from tests.support.config import MODEL
from tests.support.fakeserver import FakeServer
from tests.support.replies import json_reply, raw_reply


def body(name: str) -> bytes:
    return read_recording((RECORDINGS / name).read_bytes()).body


@pytest.mark.parametrize("name", ["props.http", "router_props.http"])
def test_props_recordings(name: str) -> None:
    props = parse_props(body(name))
    assert props.total_slots == 2
    assert props.n_ctx == 2048  # per slot: the server ran -c 4096 -np 2
    assert props.chat_template.startswith("{#- Boxmaker's chat template")


@pytest.mark.parametrize("name", ["slots.http", "router_slots.http"])
def test_slots_recordings_idle(name: str) -> None:
    assert parse_slots(body(name)) == (SlotState(0, False, 2048), SlotState(1, False, 2048))


def test_slots_recording_while_processing() -> None:
    assert [s.is_processing for s in parse_slots(body("slots_processing.http"))] == [True, True]


def test_tokenize_recording() -> None:
    assert parse_tokenize(body("tokenize.http")) == (19556, 28, 905, 17)


def test_control_recordings_and_refusals() -> None:
    assert parse_control(body("reasoning_end.control.http")) == (True, None)
    assert parse_control(body("router_reasoning_end.control.http")) == (True, None)
    assert parse_control(b'{"success":false,"message":"no such task"}') == (False, "no such task")
    assert parse_control(b'{"success":"true"}') == (False, None)  # only the JSON true is success
    assert parse_control(b"[]")[0] is False
    with pytest.raises(BadResponse, match="not JSON"):
        parse_control(b"ok")


def test_control_body_is_what_the_recorder_sent() -> None:
    sent = (RECORDINGS / "reasoning_end.control.request.json").read_bytes()
    import json

    fields = json.loads(sent)
    assert control_body(fields["id"], fields["model"]) == (
        b'{"id":"%s","action":"reasoning_end","model":"%s"}'
        % (fields["id"].encode(), fields["model"].encode())
    )
    assert json.loads(control_body(fields["id"], fields["model"])) == fields


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{}", "/props: missing 'default_generation_settings'"),
        (
            b'{"default_generation_settings":{},"chat_template":"t","total_slots":1}',
            "/props.default_generation_settings: missing 'n_ctx'",
        ),
        (
            b'{"default_generation_settings":{"n_ctx":1},"chat_template":1,"total_slots":1}',
            "/props.chat_template: expected str",
        ),
        (
            b'{"default_generation_settings":{"n_ctx":1},"chat_template":"t","total_slots":true}',
            "/props.total_slots: expected int",
        ),
    ],
)
def test_props_shape_errors_name_the_field(data: bytes, message: str) -> None:
    with pytest.raises(BadResponse, match=message):
        parse_props(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{}", "/slots: expected an array"),
        (b"[1]", r"/slots\[0\]: expected an object"),
        (b'[{"id":0}]', r"/slots\[0\]: missing 'is_processing'"),
        (b'[{"id":0,"is_processing":1}]', r"/slots\[0\].is_processing: expected bool"),
        (b"<html>", "/slots: the answer is not JSON"),
    ],
)
def test_slots_shape_errors(data: bytes, message: str) -> None:
    with pytest.raises(BadResponse, match=message):
        parse_slots(data)


def test_tokenize_shape_errors() -> None:
    with pytest.raises(BadResponse, match="expected an array of integers"):
        parse_tokenize(b'{"tokens":[1,"2"]}')


@pytest.mark.parametrize(
    ("cache_n", "outcome"),
    [
        (100, CacheHit()),  # all of it
        (140, CacheHit()),  # more than the total (another request grew the cache): no loss
        (36, CacheHit()),  # exactly 64 short
        (35, CacheMiss(expected=100, got=35)),  # 65 short
        (0, CacheMiss(expected=100, got=0)),
    ],
)
def test_cache_outcome_64_token_rule(cache_n: int, outcome: object) -> None:
    previous = Timings(cache_n=10, prompt_n=70, predicted_n=20)  # total 100
    current = Timings(cache_n=cache_n, prompt_n=5, predicted_n=9)
    assert cache_outcome(previous, current) == outcome


def test_first_turn_against_an_empty_previous_is_a_hit() -> None:
    assert cache_outcome(Timings(0, 0, 0), Timings(0, 50, 5)) == CacheHit()


# ---- the calls, through the fake server ----


def test_client_info_calls_carry_the_model(fake: FakeServer, sock_dir: Path) -> None:
    fake.on("GET", "/props", raw_reply((RECORDINGS / "router_props.http").read_bytes(), every=512))
    fake.on("GET", "/slots", raw_reply((RECORDINGS / "slots_processing.http").read_bytes()))
    fake.on("POST", "/tokenize", raw_reply((RECORDINGS / "tokenize.http").read_bytes()))
    client = Client(make_config(at(fake)))
    assert client.props().n_ctx == 2048
    assert [s.is_processing for s in client.slots()] == [True, True]
    assert client.tokenize("Hello, world!") == (19556, 28, 905, 17)
    props, slots = fake.requests("/props")[0], fake.requests("/slots")[0]
    assert props.target == f"/props?model={MODEL}"
    assert slots.query == {"model": MODEL}
    assert fake.requests("/tokenize")[0].json == {"model": MODEL, "content": "Hello, world!"}


def test_info_call_error_status_is_http_status(fake: FakeServer) -> None:
    fake.on("GET", "/slots", raw_reply((RECORDINGS / "router_slots_no_model.http").read_bytes()))
    fake.on("GET", "/props", json_reply(503, {"error": {"message": "Loading model"}}, chunked=True))
    client = Client(make_config(at(fake)))
    with pytest.raises(HttpStatus) as caught:
        client.slots()
    assert caught.value.status == 400
    assert "model name is missing" in caught.value.body
    with pytest.raises(HttpStatus, match=r"HTTP 503: .*Loading model"):
        client.props()
