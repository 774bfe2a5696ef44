"""The keeper tests' fake llama-server: FakeSlots behind a FakeServer on a short socket path."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakeserver import FakeServer
from tests.support.loopd.fake_slots import FakeSlots
from tests.support.procs import short_tmpdir


@pytest.fixture
def rig() -> Iterator[tuple[FakeServer, FakeSlots, Path]]:
    folder = short_tmpdir("bk-")
    (folder / "slots").mkdir()
    fake_slots = FakeSlots(folder / "slots")
    with FakeServer(folder / "infer.sock") as server:
        server.on("GET", "/slots", fake_slots.slots)
        server.on("GET", "/props", fake_slots.props)
        server.on("POST", "/completion", fake_slots.completion)
        for slot in (0, 1):
            server.on("POST", f"/slots/{slot}", fake_slots.action)
        yield server, fake_slots, folder
