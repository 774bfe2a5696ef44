"""Fixtures over the stack rig (tests/support/stack.py: one real llama-server per mode behind a real
inferproxy, started on first use and stopped at the end of the session; `stack` runs a test against
both modes) and the fake server on a Unix socket for the client's tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.verify.tee import Tee
from tests.support.fakeserver import FakeServer
from tests.support.procs import short_tmpdir
from tests.support.stack import MODES, Stack, Stacks


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short folder under /tmp: a Unix socket path must fit in 107 bytes."""
    path = short_tmpdir("bx-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake(sock_dir: Path) -> Iterator[FakeServer]:
    with FakeServer(sock_dir / "infer.sock") as server:
        yield server


@pytest.fixture(scope="session")
def stacks() -> Iterator[Stacks]:
    all_stacks = Stacks()
    try:
        yield all_stacks
    finally:
        all_stacks.stop_all()


@pytest.fixture(params=MODES)
def stack(request: pytest.FixtureRequest, stacks: Stacks) -> Stack:
    """The stack of each mode in turn: a test that takes it runs against both."""
    return stacks.get(request.param)


@pytest.fixture
def single_stack(stacks: Stacks) -> Stack:
    return stacks.get("single")


@pytest.fixture
def router_stack(stacks: Stacks) -> Stack:
    return stacks.get("router")


@pytest.fixture
def tee(stack: Stack) -> Iterator[Tee]:
    """A Tee in front of the stack's inferproxy, on a socket of its own."""
    t = Tee(stack.dir / "tee.sock", stack.socket)
    try:
        yield t
    finally:
        t.stop()
        (stack.dir / "tee.sock").unlink(missing_ok=True)
