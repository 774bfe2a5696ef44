"""The shared helpers in tests/support that have no test module of their own: wait_for, the TOML
writer."""

import tomllib
from pathlib import Path

import pytest

from boxmaker._toml import toml_dumps
from tests.support.procs import wait_for


def test_wait_for_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "", "ready"])
    assert wait_for(lambda: next(values), "the value", timeout=1.0, interval=0.0) == "ready"


def test_wait_for_fails_with_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"^waited 0.05 s for the door to open$"):
        wait_for(lambda: False, "the door to open", 0.05, 0.01)


def test_wait_for_raises_the_error_it_is_given() -> None:
    with pytest.raises(RuntimeError, match=r"^waited 0.05 s for the door to open$"):
        wait_for(lambda: False, "the door to open", 0.05, 0.01, RuntimeError)


def test_toml_dumps_reads_back_with_tomllib() -> None:
    inference = {"slots": [0, 1], "ratio": 0.5, "on": True, "quote": 'a "b" \\ c'}
    table = {
        "inference": {**inference, "socket": Path("/tmp/x y/s"), "sampling": {"seed": 7}},
        "expect": {"n_ctx": 2048, "map": {"k": "v"}},
    }
    assert tomllib.loads(toml_dumps(table)) == {
        "inference": {**inference, "socket": "/tmp/x y/s", "sampling": {"seed": 7}},
        "expect": {"n_ctx": 2048, "map": {"k": "v"}},
    }


def test_toml_dumps_refuses_what_it_cannot_write() -> None:
    with pytest.raises(TypeError, match="no TOML form for None"):
        toml_dumps({"a": None})
