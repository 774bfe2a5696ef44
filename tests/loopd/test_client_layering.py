"""The inference client's layering (STYLE.md R1/R2): the [core] modules do no I/O, and
`transport` is the only module of the client that touches a socket.

The check is tests/proto/test_layering.py's `io_uses` (ast, so imports inside functions count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import boxmaker.loopd
from tests.proto.test_layering import io_uses

LOOPD = Path(boxmaker.loopd.__file__).resolve().parent
CORES = [
    "llama/http.py",
    "llama/sse.py",
    "llama/request.py",
    "llama/assemble.py",
    "llama/info.py",
    "llama/retry.py",
    "llama/waits.py",
]
SHELLS = ["llama/transport.py", "llama/chat.py", "llama/gate.py", "llama/client.py"]


@pytest.mark.parametrize("name", CORES)
def test_core_module_does_no_io(name: str) -> None:
    path = LOOPD / name
    assert io_uses(path.read_text("utf-8"), str(path)) == [], f"{name} reaches for I/O"


@pytest.mark.parametrize("name", CORES + SHELLS)
def test_only_transport_imports_socket(name: str) -> None:
    tree = ast.parse((LOOPD / name).read_text("utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    uses_socket = any(m.split(".")[0] in {"socket", "selectors", "ssl"} for m in names)
    assert uses_socket == (name == "llama/transport.py")


@pytest.mark.parametrize("name", CORES + SHELLS)
def test_modules_stay_small(name: str) -> None:
    assert len((LOOPD / name).read_text("utf-8").splitlines()) <= 400


def test_no_module_of_the_client_starts_a_thread() -> None:
    for name in CORES + SHELLS:
        source = (LOOPD / name).read_text("utf-8")
        assert "Thread(" not in source, name
