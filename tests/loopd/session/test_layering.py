"""The session package's [core] modules do no I/O (STYLE.md R2), checked as proto's are."""

from pathlib import Path

import pytest

import boxmaker.loopd.session
from tests.proto.test_layering import io_uses

SESSION_DIR = Path(boxmaker.loopd.session.__file__).resolve().parent
CORE = ("replay.py", "check.py")


@pytest.mark.parametrize("name", CORE)
def test_core_module_does_no_io(name: str) -> None:
    path = SESSION_DIR / name
    assert "[core]" in path.read_text("utf-8")
    assert io_uses(path.read_text("utf-8"), str(path)) == []
