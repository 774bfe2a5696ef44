from collections.abc import Iterator

import pytest

from tests.support.brokerd.mcp.servers import Rig, mcp_rig


@pytest.fixture
def rig() -> Iterator[Rig]:
    with mcp_rig() as r:
        yield r
