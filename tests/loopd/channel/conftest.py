from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.serve import ServeEnv, serve_env


@pytest.fixture
def env() -> Iterator[ServeEnv]:
    with serve_env() as e:
        yield e
