"""Fixtures of the turn-loop tests: a fake server with the scripted model and a home on disk (`Env`;
`Turns`, which runs turns of one session there, is in tests/support/turn.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.support.fakeserver import FakeServer
from tests.support.procs import short_tmpdir
from tests.support.serve import tokenize_reply
from tests.support.turn import Env, serve_model


@pytest.fixture
def env() -> Iterator[Env]:
    folder = short_tmpdir("bt-")
    try:
        with FakeServer(folder / "infer.sock") as fake:
            # a large message is measured before it is recorded (turn/kit.py): a token a 4 bytes
            fake.on("POST", "/tokenize", tokenize_reply)
            yield Env(fake, serve_model(fake), folder / "home")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
