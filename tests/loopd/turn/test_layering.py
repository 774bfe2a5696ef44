"""The turn loop's and the tools' layering (STYLE.md R2): the [core] modules do no I/O, and every
module stays small. tests/proto/test_layering.py's `io_uses` reads the source with `ast`."""

from __future__ import annotations

from pathlib import Path

import pytest

import boxmaker.loopd
from tests.proto.test_layering import io_uses

LOOPD = Path(boxmaker.loopd.__file__).resolve().parent
CORES = [
    "turn/loop.py",
    "turn/limits.py",
    "turn/records.py",
    "tools/registry.py",
    "tools/schema.py",
]
SHELLS = ["turn/runner.py", "turn/command.py", "tools/port.py"]


@pytest.mark.parametrize("name", CORES)
def test_core_module_does_no_io(name: str) -> None:
    path = LOOPD / name
    assert io_uses(path.read_text("utf-8"), str(path)) == [], f"{name} reaches for I/O"


@pytest.mark.parametrize("name", CORES + SHELLS)
def test_modules_stay_small(name: str) -> None:
    assert len((LOOPD / name).read_text("utf-8").splitlines()) <= 400


def test_only_the_runner_starts_threads() -> None:
    for name in CORES + SHELLS:
        source = (LOOPD / name).read_text("utf-8")
        assert ("Thread(" in source) == (name == "turn/runner.py"), name
