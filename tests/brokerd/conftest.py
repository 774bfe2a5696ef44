from collections.abc import Iterator

import pytest

from tests.brokerd.rig import Rig, remove, short_base


@pytest.fixture
def rig() -> Iterator[Rig]:
    base = short_base()
    r = Rig(base)
    try:
        yield r
    finally:
        if r.daemon is not None:
            r.daemon.kill()
        remove(base)
