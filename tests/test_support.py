"""The shared helpers in tests/support that have no test module of their own: wait_for, the TOML
writer, the parallel run's model unit."""

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from boxmaker._toml import toml_dumps
from tests.support import model_group
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


class _Worker:
    """What xdist's scheduler asks of a worker: the tests it is sent, by their index."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)

    def shutdown(self) -> None:
        pass


def test_the_real_model_modules_are_one_unit_sent_first(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"])  # make test's -n 2
    collection = [  # the largest unit first, xdist would say: test_a
        *(f"tests/brokerd/test_a.py::t{i}" for i in range(5)),
        "tests/e2e/test_tool_model.py::t1",
        "tests/fast/test_b.py::t1",
        "tests/loopd/test_cli.py::t1",
        "tests/loopd/test_cli.py::t2",
    ]
    sched = model_group.Scheduling(pytestconfig)
    first, second = _Worker("gw0"), _Worker("gw1")
    for worker in (first, second):
        sched.add_node(worker)  # type: ignore[arg-type]
        sched.add_node_collection(worker, collection)  # type: ignore[arg-type]
    sched.schedule()
    named = [[collection[i] for i in unit] for unit in first.sent]
    assert named[0] == [
        "tests/e2e/test_tool_model.py::t1",
        "tests/loopd/test_cli.py::t1",
        "tests/loopd/test_cli.py::t2",
    ]
    model = {n for n in collection if model_group.module_of(n) in model_group.MODULES}
    elsewhere = {collection[i] for unit in second.sent for i in unit}
    assert elsewhere and not elsewhere & model
