import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.brokerd.rig import Rig, remove, short_base


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


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="carry-", dir="/dev/shm"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)
