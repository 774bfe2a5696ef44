"""The cursor files: one small file per channel, `<state folder>/cursors/<channel id>.json`,
`{"after": <post id or "">, "type": <channel type>}`, written atomically (a temporary file,
fsynced, renamed over), so a crash leaves the old cursor or the new one, never half of one. A
cursor only saves work (M4 section 6): an unreadable file is said and that channel starts afresh.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson


def read_cursors(folder: Path, say: Callable[[str], None]) -> dict[str, tuple[str | None, str]]:
    """channel -> (after, channel type) for every readable cursor file in `folder`."""
    found: dict[str, tuple[str | None, str]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            d = orjson.loads(path.read_bytes())
            after, kind = d.get("after"), d["type"]
            found[path.stem] = (after if isinstance(after, str) else None, str(kind))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            say(f"cursor {path.name} unreadable ({e}); that channel starts afresh")
    return found


def write_cursor(folder: Path, channel: str, after: str, kind: str) -> None:
    data = orjson.dumps({"after": after, "type": kind})
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cursor-")
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, folder / f"{channel}.json")
