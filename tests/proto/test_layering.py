"""boxmaker.proto is sans-IO: no module in it may import an I/O module or call an I/O builtin.

STYLE.md R2: the cores take bytes and values and return values; sockets, files, pipes, threads and
clocks belong to the shells. uvloop's tests/test_sourcecode.py is the precedent for checking this
in the suite. The check reads the source with `ast`, so an import inside a function, a `try` or an
`if TYPE_CHECKING` block is caught too.
"""

import ast
from pathlib import Path

import pytest

import boxmaker.proto

PROTO_DIR = Path(boxmaker.proto.__file__).resolve().parent

# The brief's list, then the rest of the stdlib that reaches outside the process or sleeps.
FORBIDDEN_MODULES = frozenset(
    {"socket", "os", "selectors", "threading", "subprocess", "asyncio", "time"}
    | {"multiprocessing", "signal", "shutil", "tempfile", "pathlib", "importlib"}
)
FORBIDDEN_CALLS = frozenset({"open", "print", "input", "exec", "eval", "__import__", "breakpoint"})


def io_uses(source: str, filename: str = "<source>") -> list[str]:
    """Every forbidden import or call in `source`, as "line N: what"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in FORBIDDEN_MODULES
            ]
        elif isinstance(node, ast.ImportFrom):
            # Relative imports (level > 0) are this package's own modules.
            if node.level == 0 and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS
        ):
            found.append(f"line {node.lineno}: call {node.func.id}()")
    return found


MODULES = sorted(PROTO_DIR.glob("*.py"))


def test_the_package_is_all_there() -> None:
    names = {p.name for p in MODULES}
    assert {"__init__.py", "frame.py", "log.py", "hash.py", "ids.py", "errors.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_proto_module_does_no_io(path: Path) -> None:
    assert io_uses(path.read_text("utf-8"), str(path)) == [], f"{path.name} reaches for I/O"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import os", ["line 1: import os"]),
        ("import os.path", ["line 1: import os.path"]),
        ("import json, socket as s", ["line 1: import socket"]),
        ("from time import sleep", ["line 1: from time import ..."]),
        ("from asyncio.streams import StreamReader", ["line 1: from asyncio.streams import ..."]),
        ("def f():\n    import threading", ["line 2: import threading"]),
        ("try:\n    import selectors\nexcept ImportError:\n    pass", ["line 2: import selectors"]),
        (
            "import subprocess\nimport pathlib",
            ["line 1: import subprocess", "line 2: import pathlib"],
        ),
        ("x = open('log')", ["line 1: call open()"]),
        ("m = __import__('os')", ["line 1: call __import__()"]),
        ("print('hi')", ["line 1: call print()"]),
    ],
)
def test_the_check_catches_each_form(source: str, found: list[str]) -> None:
    assert io_uses(source) == found


@pytest.mark.parametrize(
    "source",
    [
        "import hashlib, re, enum",
        "import orjson",
        "from datetime import UTC, datetime",
        "from . import frame",
        "from .time import x",  # a sibling module, not the stdlib's
        "from ..proto import log",
        "import timeit_not_time",
        "f.open()",  # a method, not the builtin
    ],
)
def test_the_check_allows_pure_imports(source: str) -> None:
    assert io_uses(source) == []
