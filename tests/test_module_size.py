"""Every module in boxmaker/ stays under about 400 lines (STYLE.md: one purpose per module)."""

from __future__ import annotations

from pathlib import Path

import boxmaker

PACKAGE = Path(boxmaker.__file__).resolve().parent
MAX_LINES = 400
# Over the limit for now, each with the issue that splits it. An entry that is back under the
# limit fails too, so the list only shrinks.
KNOWN_OVER = {
    "inferproxy/proxy.py": "issue 8 item 3 moves its listener into boxmaker/_daemon/",
}


def sizes() -> dict[str, int]:
    files = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx"), *PACKAGE.rglob("*.pxd")]
    return {
        str(path.relative_to(PACKAGE)): len(path.read_text("utf-8").splitlines()) for path in files
    }


def test_the_walk_finds_the_config_modules() -> None:
    found = sizes()
    for name in ("loopd/config.py", "loopd/_kinds.py", "loopd/_walker.py", "_fast/_sse_c.pyx"):
        assert name in found, name


def test_no_module_is_over_the_limit() -> None:
    over = {name: n for name, n in sizes().items() if n > MAX_LINES and name not in KNOWN_OVER}
    assert over == {}, f"split these (at most {MAX_LINES} lines each): {over}"


def test_every_known_exception_is_still_over() -> None:
    found = sizes()
    fixed = [name for name in KNOWN_OVER if found.get(name, 0) <= MAX_LINES]
    assert fixed == [], f"remove from KNOWN_OVER: {fixed}"
